"""Tuned candidates on a real GPU: a trial wrong at the tiniest sizes never wins, and an imported
KernelBench task's hand-written kernel is OK, tuned or not. torch.compile is off: these tests read
no comparator figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsr import candidate, tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Verdict, WorkerSpec
from tests.support.gpu_evaluators import spec
from tests.support.paths import ROOT
from tests.support.xdist_gpus import shared_budget

pytestmark = pytest.mark.gpu

# CUT 0 is right and spins a little; CUT 1 spins not at all (faster) and leaves y[i] unwritten
# for i >= 1 when n < 8 (wrong at the tiniest test sizes only, right at the largest small size
# that every trial is checked at first); CUT 2 is wrong the same way and spins longest (slower).
TUNED_GELU = """/* fsr
[tunables]
CUT = [0, 1, 2]

[[launch]]
kernel = "gelu_cut"
grid = ["cdiv(n, 256)"]
block = ["256"]
args = ["x", "y", "n"]
*/
extern "C" __global__ void gelu_cut(const float* x, float* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || (CUT != 0 && n < 8 && i >= 1)) return;
    float v = x[i];
    float s = v;
    for (int k = 0; k < (CUT == 0 ? 200 : CUT == 2 ? 2000 : 0); ++k) s = s * 1.0000001f + 1e-30f;
    v += s * 0.0f;
    y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
}
"""


def test_a_trial_wrong_at_the_tiniest_sizes_never_wins():
    """Tuning checks a trial at the largest small size, times it, and checks the other small sizes
    only when it beats the best so far: the faster wrong configuration must be refused there, and
    the slower one, left unchecked, must not be the winner either."""
    from fsr.evaluate.gpu.tuning import UNCHECKED

    task = tasks.load("gelu")
    ev = GpuEvaluator(spec(Config(eval=EvalConfig(torch_compile="off", prepared_max_bytes=shared_budget()), tune=TuneConfig(trials=8)), ("gelu",)))
    try:
        result = ev.evaluate(candidate.parse(TUNED_GELU, task))
    finally:
        ev.close()
    assert result.verdict == Verdict.OK, result.message
    assert dict(result.tuned_defines)["CUT"] == 0
    by_cut = {dict(t.values)["CUT"]: t for t in result.trials if not t.cached}
    assert set(by_cut) == {0, 1, 2}
    assert by_cut[0].feasible and by_cut[0].reason == ""
    assert not by_cut[1].feasible and by_cut[1].reason.startswith("wrong at"), by_cut[1]
    assert by_cut[2].reason == UNCHECKED and by_cut[2].latency_us > by_cut[0].latency_us, by_cut[2]


@pytest.fixture(scope="module")
def imported_relu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """KernelBench's ReLU as `fsr import` leaves it, imported once for the module."""
    pytest.importorskip("torch")
    from fsr.kernelbench.one import import_one

    folder = tmp_path_factory.mktemp("kb")
    done = import_one(ROOT / "tests/data/kernelbench/level1/19_ReLU.py", folder, max_bench_bytes=2**28)
    assert done["ok"], done
    return folder / "kb1_19_relu"


@pytest.mark.parametrize("tune_trials", [0, 8])
def test_a_correct_kernel_of_an_imported_task_is_ok(imported_relu, tune_trials):
    """KernelBench's ReLU imported by `fsr import` and its hand-written kernel (bench/kernelbench):
    OK at every test size, tuned or not (its inputs were drawn float64 while a reference ran in
    another thread, and the kernel read them as float32 garbage). Each case in an evaluator of its
    own: its first preparation of the task is what the race was in."""
    relu = tasks.load(str(imported_relu))
    ev = GpuEvaluator(WorkerSpec((relu,), EvalConfig(torch_compile="off", prepared_max_bytes=shared_budget()), TuneConfig(trials=tune_trials)))
    try:
        result = ev.evaluate(candidate.parse((ROOT / "bench/kernelbench/kb1_19_relu.cu").read_text(), relu))
    finally:
        ev.close()
    assert result.verdict == Verdict.OK, f"{result.verdict}: {result.message[:400]}"
