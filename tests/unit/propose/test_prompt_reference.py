"""A built-in task's prompt shows the reference's semantics (the inputs' distribution and the
float64 answer) and none of fsr's harness: no comparator (`library`, `torch_eager`), none of
their helpers (`_bf16`, `_bits`), no CuPy or torch, no word about the workers."""

from __future__ import annotations

import pytest

from fsr import tasks
from fsr.propose.base import ProposalRequest
from fsr.propose.prompt import build
from fsr.propose.reference_text import semantics

HARNESS = ("torch_eager", "def library", "_bf16(", "_bits(", "import cupy", "import torch", "worker",
           "comparator", "cuBLAS", "CuPy")


@pytest.mark.parametrize("name", tasks.list_tasks())
def test_a_built_in_tasks_first_prompt_holds_its_reference_and_no_harness(name: str) -> None:
    user = build(ProposalRequest(tasks.load(name), ()), None).messages[1][1]
    shown = user.split("The reference (NumPy, computed in float64):", 1)[1]
    assert "def make_inputs(sizes, rng):" in shown and "def reference(inputs, sizes):" in shown
    for word in HARNESS:
        assert word not in shown, word


FILE = '''"""A task whose comparator uses cuBLAS."""

import numpy as np
import ml_dtypes

SCALE = 2.0  # used by reference
BF16 = np.dtype(ml_dtypes.bfloat16)


def make_inputs(sizes, rng):
    return {"x": rng.random(sizes["n"]).astype(BF16)}


# A helper of the reference: kept with its comment.
def _double(x):
    return SCALE * x


def reference(inputs, sizes):
    return {"y": _double(inputs["x"].astype(np.float64))}


# Views for the comparator: dropped with this comment.
def _view(a):
    import torch

    return torch.as_tensor(a)


def torch_eager(inputs, sizes):
    return _view(inputs["x"]) * SCALE
'''


def test_what_the_reference_reaches_is_kept_and_what_only_the_comparators_reach_is_not() -> None:
    shown = semantics(FILE)
    for kept in ("import numpy as np", "import ml_dtypes", "SCALE = 2.0  # used by reference", "BF16 = np.dtype",
                 "# A helper of the reference: kept with its comment.\ndef _double(x):", "def reference(",
                 "def make_inputs("):
        assert kept in shown, kept
    for gone in ("cuBLAS", "Views for the comparator", "def _view", "import torch", "def torch_eager"):
        assert gone not in shown, gone
    assert semantics("def reference(:\n") == "def reference(:\n"  # unparsable: shown as it is
