"""The evaluator on a real GPU: verdicts of the adversarial corpus, recovery after a crash and a
hang in the same evaluator, and timing that repeats."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fsr import candidate, tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Verdict, WorkerSpec
from tests.support.paths import ROOT

from ..adversarial.corpus import corpus

pytestmark = pytest.mark.gpu

HANG_TIMEOUT_S = 8.0


def spec(config: Config, names: tuple[str, ...] | None = None, **fields) -> WorkerSpec:
    """A spec of these tasks (default: every task), as a campaign's driver builds one."""
    loaded = [tasks.load(n) for n in (tasks.list_tasks() if names is None else names)]
    return WorkerSpec(tuple(loaded), config.eval, config.tune, **fields)


@pytest.fixture(scope="module")
def evaluator():
    # torch.compile off: compiling every task's comparator would double this module's time
    ev = GpuEvaluator(spec(Config(eval=EvalConfig(timeout_s=HANG_TIMEOUT_S, torch_compile="off"),
                                  tune=TuneConfig(trials=0))))
    yield ev
    ev.close()


def parse(task_name: str, path: Path):
    return candidate.parse(path.read_text(), tasks.load(task_name))


def test_baseline_is_ok_and_timed(evaluator):
    task = tasks.load("softmax")
    result = evaluator.evaluate(candidate.parse(task.baseline_source, task))
    assert result.verdict == Verdict.OK, result.message
    assert result.timing is not None and result.timing.median_us > 0
    assert len(result.checks) == len(task.test_sizes) + 1 and all(c.passed for c in result.checks)
    assert result.speedup == pytest.approx(1.0, rel=0.1)
    assert result.device and result.resources.registers > 0


@pytest.mark.parametrize("task_name,path,expected", corpus(), ids=[p.stem for _, p, _ in corpus()])
def test_adversary_gets_its_verdict_and_evaluator_recovers(evaluator, task_name, path, expected):
    started = time.monotonic()
    result = evaluator.evaluate(parse(task_name, path))
    elapsed = time.monotonic() - started
    assert result.verdict == Verdict(expected), f"{path.name}: {result.verdict} {result.message[:400]}"
    if expected == "CRASH":  # one clean line: the CUDA error and what it means
        assert "\n" not in result.message and "Traceback" not in result.message, result.message
        assert ".py" not in result.message and "CUDA" in result.message, result.message
    if expected == "TIMEOUT":
        assert elapsed < HANG_TIMEOUT_S + 10, f"hang reported after {elapsed:.1f} s"
    # the same evaluator still judges a good kernel right afterwards
    task = tasks.load(task_name)
    good = evaluator.evaluate(candidate.parse(task.baseline_source, task))
    assert good.verdict == Verdict.OK, good.message


def test_same_kernel_twice_gives_close_medians(evaluator):
    task = tasks.load("softmax")
    path = ROOT / "examples" / "softmax_fast.cu"
    source = path.read_text() if path.exists() else task.baseline_source
    first = evaluator.evaluate(candidate.parse(source, task))
    second = evaluator.evaluate(candidate.parse(source, task))
    assert first.verdict == second.verdict == Verdict.OK, first.message + second.message
    assert first.timing and second.timing
    assert abs(first.timing.median_us - second.timing.median_us) / first.timing.median_us < 0.02


def test_task_setup_is_paid_by_its_first_evaluation_only(evaluator):
    task = tasks.load("layernorm")  # not used by the tests before this one
    first = evaluator.evaluate(candidate.parse(task.baseline_source, task))
    second = evaluator.evaluate(candidate.parse(task.baseline_source, task))
    assert first.verdict == second.verdict == Verdict.OK, first.message + second.message
    assert 0.05 < first.setup_s < first.wall_s  # references at 8192 x 8192, uploads, baseline timing
    assert second.setup_s < 0.05


def test_warm_tasks_are_prepared_before_their_first_candidate():
    """A campaign's tasks named up front are built while the child waits for work (a name of no
    task of the campaign among them is ignored)."""
    task = tasks.load("layernorm")
    setup = {}
    for warm in ((), ("layernorm", "no-such-task")):
        ev = GpuEvaluator(spec(Config(tune=TuneConfig(trials=0)), ("layernorm",), warm=warm))
        try:
            ev.device()
            time.sleep(8.0)  # the child is idle: the warm build (about 2-3 s) runs meanwhile
            result = ev.evaluate(candidate.parse(task.baseline_source, task))
            assert result.verdict == Verdict.OK, result.message
            setup[warm] = result.setup_s
        finally:
            ev.close()
    cold, warmed = setup.values()
    assert warmed < cold - 0.5, setup


@pytest.mark.parametrize("task_name", tasks.list_tasks())
def test_every_task_baseline_and_template_default_are_ok(evaluator, task_name):
    task = tasks.load(task_name)
    sources = [task.baseline_source] + ([task.template_source] if task.template_source else [])
    for source in sources:
        result = evaluator.evaluate(candidate.parse(source, task))
        assert result.verdict == Verdict.OK, f"{task_name}: {result.message[:400]}"
        assert result.timing and result.timing.ceiling_fraction < 1.1


def test_an_honest_wgmma_gemm_is_ok_on_an_sm_90_device(evaluator):
    """fsr compiles code that only sm_90a assembles for sm_90a on an sm_90 device: a wgmma kernel (one m64n64k16 a
    step, operands from shared-memory descriptors) compiles, runs and is right at every size."""
    if evaluator.device().arch != "sm_90":
        pytest.skip(f"wgmma needs an sm_90 device, not {evaluator.device().arch}")
    path = ROOT / "tests" / "data" / "wgmma" / "gemm_bf16_wgmma.cu"
    result = evaluator.evaluate(parse("gemm_bf16", path))
    assert result.verdict == Verdict.OK, result.message[:400]


@pytest.mark.parametrize(("dynamic", "static_floats"), [("96 * 1024", 0), ("48 * 1024", 64), ("40 * 1024", 4096)],
                         ids=["dynamic-96k", "dynamic-48k-plus-static", "dynamic-40k-plus-static-16k"])
def test_large_shared_memory_is_opted_in(evaluator, dynamic, static_floats):
    """Past 48 KiB of shared memory a block (static and dynamic together) must opt in; fsr does
    it for the header's smem expression, so such a kernel launches and is judged like any other,
    also where the dynamic part alone is within 48 KiB."""
    task = tasks.load("softmax")
    source = task.baseline_source.replace('args = ["x", "y", "rows", "cols"]',
                                          f'smem = "{dynamic}"\nargs = ["x", "y", "rows", "cols"]')
    fixed = (f"__shared__ float fixed[{static_floats}]; fixed[threadIdx.x % {static_floats}] = 1.0f; big[threadIdx.x + 1] = fixed[(threadIdx.x + 1) % {static_floats}];"
             if static_floats else "")
    source = source.replace("if (r >= rows) return;",
                            f"extern __shared__ float big[]; big[threadIdx.x] = 0.0f; {fixed} if (r >= rows) return;")
    result = evaluator.evaluate(candidate.parse(source, task))
    assert result.verdict == Verdict.OK, result.message


def test_fsr_eval_command_reports_resources_and_stages():
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "fsr", "eval", "softmax", "tasks/softmax/baseline.cu", "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.splitlines()[-1])
    assert data["verdict"] == "OK" and data["resources"]["registers"] > 0
    assert data["verify_s"] > 0 and data["bench_s"] > 0
    assert data["torch_us"] > 0 and data["vs_torch"] > 0  # torch.softmax, timed like the library


def test_library_and_torch_eager_are_timed_like_the_candidates(evaluator):
    task = tasks.load("softmax")
    result = evaluator.evaluate(candidate.parse(task.baseline_source, task))
    assert result.verdict == Verdict.OK, result.message
    # both far faster than the one-thread-per-row baseline (about 4.7 ms on an H200)
    assert result.library_us and result.torch_us and result.baseline_us
    assert 0 < result.torch_us < result.baseline_us / 4 and 0 < result.library_us < result.baseline_us


def test_a_torch_comparator_that_fails_leaves_no_figure_and_no_verdict(tmp_path):
    import shutil

    shutil.copytree(ROOT / "tasks" / "softmax", tmp_path / "softmax")
    reference = tmp_path / "softmax" / "reference.py"
    text = reference.read_text()
    head = "def torch_eager(inputs, sizes):\n"
    assert head in text  # else the comparator below would not be the broken one
    reference.write_text(text.replace(head, head + "    raise RuntimeError('broken comparator')\n"))
    task = tasks.load("softmax", str(tmp_path))
    ev = GpuEvaluator(WorkerSpec((task,), tune=TuneConfig(trials=0)))
    try:
        result = ev.evaluate(candidate.parse(task.baseline_source, task))
    finally:
        ev.close()
    assert result.verdict == Verdict.OK, result.message
    assert result.torch_us is None and result.library_us


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
    ev = GpuEvaluator(spec(Config(tune=TuneConfig(trials=8)), ("gelu",)))
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


def test_a_task_without_baseline_is_timed_against_pytorch_eager_only(tmp_path):
    """An imported task has no baseline.cu: preparing it times no baseline, and a correct kernel
    is OK with no baseline time (so no speedup over one) and PyTorch eager's time beside it."""
    from fsr.testing.fakes import without_baseline

    softmax = tasks.load("softmax")
    bare = without_baseline(softmax, tmp_path)
    ev = GpuEvaluator(WorkerSpec((bare,), EvalConfig(torch_compile="off"), TuneConfig(trials=0)))
    try:
        result = ev.evaluate(candidate.parse(softmax.baseline_source, bare))
    finally:
        ev.close()
    assert result.verdict == Verdict.OK, result.message
    assert result.baseline_us is None and result.speedup is None
    assert result.timing is not None and result.timing.median_us > 0


def test_torch_compile_is_timed_apart_from_its_compile_and_off_means_off():
    pytest.importorskip("torch")
    softmax = tasks.load("softmax")
    times = {}
    for mode in ("default", "off"):
        ev = GpuEvaluator(WorkerSpec((softmax,), EvalConfig(torch_compile=mode), TuneConfig(trials=0)))
        try:
            times[mode] = ev.evaluate(candidate.parse(softmax.baseline_source, softmax))
        finally:
            ev.close()
    on, off = times["default"], times["off"]
    assert on.verdict == Verdict.OK and on.torch_us and on.torch_compile_us and on.torch_compile_s
    assert on.torch_compile_s > on.torch_compile_us * 1e-6 * 100  # the compile is not in the latency
    assert 0.2 < on.torch_compile_us / on.torch_us < 5  # the same op, timed alike
    assert off.torch_compile_us is None and off.torch_compile_s is None and off.torch_us


def test_comparators_timed_beside_candidates_reach_later_evaluations_and_are_charged():
    """A campaign's evaluator (beside=True) does not wait for torch.compile: the first candidates
    of a task carry no comparator figures, later ones carry the same kind of figures the
    foreground path gives (torch.compile's compile apart from its latency), and the seconds the
    comparators held the GPU are charged as preparing (the total setup exceeds the first
    evaluation's)."""
    pytest.importorskip("torch")
    softmax = tasks.load("softmax")
    kernel = candidate.parse(softmax.baseline_source, softmax)
    ev = GpuEvaluator(WorkerSpec((softmax,), EvalConfig(torch_compile="default"), TuneConfig(trials=0)), beside=True)
    try:
        results = [ev.evaluate(kernel)]
        deadline = time.monotonic() + 240
        while not results[-1].torch_compile_us and time.monotonic() < deadline:
            results.append(ev.evaluate(kernel))
    finally:
        ev.close()
    first, last = results[0], results[-1]
    assert all(r.verdict == Verdict.OK for r in results), [r.message for r in results]
    assert first.torch_us is None and first.torch_compile_us is None  # not waited for
    assert len(results) > 1, "the comparators were not timed beside the first candidate"
    assert last.torch_us and last.torch_compile_us and last.torch_compile_s and last.library_us
    assert last.torch_compile_s > last.torch_compile_us * 1e-6 * 100
    assert 0.2 < last.torch_compile_us / last.torch_us < 5
    assert sum(r.setup_s for r in results[1:]) > 0  # the comparators' GPU seconds, charged


def test_tasks_dropped_to_stay_within_the_budget_are_prepared_again_when_needed():
    """A budget of one byte holds one task at a time: every switch of task drops the other, and
    each evaluation is still OK (the parent prepares the dropped task again)."""
    names = ("softmax", "layernorm")
    ev = GpuEvaluator(WorkerSpec(tuple(tasks.load(n) for n in names),
                                 EvalConfig(prepared_max_bytes=1, torch_compile="off"), TuneConfig(trials=0)))
    try:
        for name in names + names:
            task = tasks.load(name)
            result = ev.evaluate(candidate.parse(task.baseline_source, task))
            assert result.verdict == Verdict.OK, f"{name}: {result.verdict} {result.message[:300]}"
    finally:
        ev.close()


@pytest.mark.parametrize("tune_trials", [0, 8])
def test_a_correct_kernel_of_an_imported_task_is_ok(tmp_path, tune_trials):
    """KernelBench's ReLU imported by `fsr import` and its hand-written kernel (bench/kernelbench):
    OK at every test size, tuned or not (its inputs were drawn float64 while a reference ran in
    another thread, and the kernel read them as float32 garbage)."""
    pytest.importorskip("torch")
    from fsr.kernelbench.one import import_one
    from tests.support.paths import ROOT as root

    done = import_one(root / "tests/data/kernelbench/level1/19_ReLU.py", tmp_path, max_bench_bytes=2**28)
    assert done["ok"], done
    relu = tasks.load(str(tmp_path / "kb1_19_relu"))
    ev = GpuEvaluator(WorkerSpec((relu,), EvalConfig(torch_compile="off"), TuneConfig(trials=tune_trials)))
    try:
        result = ev.evaluate(candidate.parse((root / "bench/kernelbench/kb1_19_relu.cu").read_text(), relu))
    finally:
        ev.close()
    assert result.verdict == Verdict.OK, f"{result.verdict}: {result.message[:400]}"
