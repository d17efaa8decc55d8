"""fsr's faults are fsr's, on a real GPU: a failure of fsr's own code in the GPU child (here, a
program fsr compiled for another architecture, which the driver cannot load) is sent again to a
fresh child, then raised as EvaluatorFault, never recorded as the candidate's CRASH; a kernel
that breaks the context (a trap, an illegal address) is still CRASH, and the evaluator goes on."""

from __future__ import annotations

import pytest

from fsr import candidate, tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.evaluate.compile import CompileService
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import EvaluatorFault, Verdict, WorkerSpec
from tests.support.xdist_gpus import shared_budget

pytestmark = pytest.mark.gpu

SOFTMAX = tasks.load("softmax")
BASE = candidate.parse(SOFTMAX.baseline_source, SOFTMAX)


class OtherArch(CompileService):
    """Compiles every program for an architecture other than the device's: fsr's own mistake,
    which the child meets when it loads the module (not a kernel's doing)."""

    def compile(self, cand, arch):
        return super().compile(cand, "sm_80" if arch != "sm_80" else "sm_90")


def spec() -> WorkerSpec:
    config = Config(eval=EvalConfig(torch_compile="off", prepared_max_bytes=shared_budget()), tune=TuneConfig(trials=0))
    return WorkerSpec.of(config, [SOFTMAX])


def test_a_program_the_device_cannot_load_is_fsrs_fault_not_the_kernels_crash():
    from fsr.evaluate.evaluator import _TaskTimes

    ev = GpuEvaluator(spec(), compiler=OtherArch())
    try:
        ev.device()
        ev._times[SOFTMAX.name] = _TaskTimes(None, None)  # the baseline, compiled alike, would fail alike
        restarts = ev.sandbox.restarts
        with pytest.raises(EvaluatorFault) as info:
            ev.evaluate(BASE, tune=False)
    finally:
        ev.close()
    message = str(info.value)
    assert "twice" in message and "evaluator error" in message and "CUDA" in message, message
    assert ev.sandbox.restarts >= restarts + 2  # each try in a fresh child


TRAP = BASE.source.replace("if (r >= rows) return;", "if (r >= rows) return;\n    if (r == rows - 1) __trap();")


def test_a_kernel_that_breaks_the_context_is_still_crash_and_the_evaluator_goes_on():
    assert TRAP != BASE.source
    ev = GpuEvaluator(spec())
    try:
        crashed = ev.evaluate(candidate.parse(TRAP, SOFTMAX), tune=False)
        good = ev.evaluate(BASE, tune=False)
    finally:
        ev.close()
    # a trap reads as a launch failure on CUDA 13 (cudaErrorLaunchFailure): the context is what matters
    assert crashed.verdict == Verdict.CRASH and "broke the CUDA context" in crashed.message, crashed.message
    assert good.verdict == Verdict.OK, good.message
