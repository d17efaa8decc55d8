"""Adversarial kernels whose verdict needs no GPU: refused by a guard or by the compiler."""

from __future__ import annotations

import pytest

from fsr import candidate, tasks
from fsr.evaluate.static import static_stage
from fsr.types import Verdict

from .corpus import corpus

STATIC = [(t, p, v) for t, p, v in corpus() if v in ("REJECTED", "COMPILE_ERROR")]
DYNAMIC = [(t, p, v) for t, p, v in corpus() if v not in ("REJECTED", "COMPILE_ERROR")]


@pytest.mark.parametrize("task_name,path,expected", STATIC, ids=[p.stem for _, p, _ in STATIC])
def test_static_adversary_gets_its_verdict(task_name, path, expected, compiler):
    task = tasks.load(task_name)
    result = static_stage(candidate.parse(path.read_text(), task), task, "sm_90", compiler)
    assert result.verdict is not None, f"{path.name} passed the static stage"
    assert result.verdict.verdict == Verdict(expected), result.verdict.message


@pytest.mark.parametrize("task_name,path,expected", DYNAMIC, ids=[p.stem for _, p, _ in DYNAMIC])
def test_dynamic_adversary_compiles(task_name, path, expected, compiler):
    """Kernels that must be caught on the GPU get past the static stage: the GPU checks, not
    the guards, are what these test."""
    task = tasks.load(task_name)
    result = static_stage(candidate.parse(path.read_text(), task), task, "sm_90", compiler)
    assert result.verdict is None, result.verdict and result.verdict.message
    assert result.compiled is not None and result.compiled.cubin
