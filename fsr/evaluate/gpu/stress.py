"""A task's stress sets (task.toml `[[stress]]`, fsr.types.Stress) as certification checks them:
inputs drawn from entropy at the set's size as for the tests, the named floating-point inputs
mapped to x * scale + offset (and rounded back to their dtype), the float64 reference of exactly
those inputs, and the set's own tolerance (docs/judge.md, "Stress sets").

Runs in the evaluator's child process (certification builds the sets ahead on a host thread)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fsr import dtypes, tasks
from fsr.evaluate.gpu.inputs import Content
from fsr.evaluate.gpu.verify import expect
from fsr.types import Stress, Task


def stress_content(task: Task, module: Any, stress: Stress, rng: np.random.Generator) -> Content:
    """Inputs of one stress set (fsr.tasks.stress_inputs) and the reference's outputs for them,
    within the set's tolerance."""
    inputs = tasks.stress_inputs(task, module, stress, rng)
    reference = module.reference({k: v.copy() for k, v in inputs.items()}, dict(stress.size))
    tol = dtypes.Tolerance(stress.atol, stress.rtol, stress.floor)
    out = {a.name: a.dtype for a in task.outputs}
    return inputs, {k: expect(v, out[k], tol) for k, v in reference.items()}


def stress_contents(task: Task, rng: np.random.Generator) -> list[Content]:
    """One content for each of the task's stress sets, in their order."""
    module = tasks.functions(task)
    return [stress_content(task, module, stress, rng) for stress in task.stress]
