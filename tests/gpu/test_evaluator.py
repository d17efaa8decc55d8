"""The evaluator on a real GPU: verdicts of the adversarial corpus, recovery after a crash and a
hang in the same evaluator, timing that repeats, and every task's baseline at the benchmark size.
(Preparation, comparators and tuned candidates, which need evaluators of their own:
test_preparation.py, test_comparator_figures.py, test_tuned_candidates.py.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fsr import candidate, tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Verdict
from tests.support.gpu_evaluators import precompile, spec
from tests.support.paths import ROOT
from tests.support.xdist_gpus import gpu_sharers, host_threads, run_params, shared_budget

from ..adversarial.corpus import corpus

pytestmark = pytest.mark.gpu

HANG_TIMEOUT_S = 8.0
CORPUS_TASKS = sorted({task for task, _, _ in corpus()})


@pytest.fixture(scope="module")
def evaluator(request):
    """The corpus's tasks (softmax among them), hangs cut at HANG_TIMEOUT_S, torch.compile off
    (compiling its comparators is no part of these tests); the corpus compiled ahead. Its crashes
    and hangs restart its child, so it is this module's alone (each new child reads its tasks'
    benchmark sets from the session's contents cache)."""
    config = Config(eval=EvalConfig(timeout_s=HANG_TIMEOUT_S, torch_compile="off", host_threads=host_threads(),
                                    prepared_max_bytes=shared_budget(),
                                    contents_cache_dir=str(request.getfixturevalue("contents_dir"))),
                    tune=TuneConfig(trials=0))
    ev = GpuEvaluator(spec(config, CORPUS_TASKS))
    paths = {p for (p,) in run_params(request, "path")}
    precompile(ev, [parse(task_name, path) for task_name, path, _ in corpus() if path in paths])
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
    assert result.baseline_us and result.speedup == pytest.approx(result.baseline_us / result.timing.median_us)
    # the baseline against itself, timed at two moments: a unit or bookkeeping fault is off by far
    # more than other workers sharing the GPU move a timing (within 10%: the test below, alone)
    assert 1 / 3 < result.speedup < 3
    assert result.device and result.resources.registers > 0


@pytest.mark.whole_machine
def test_the_baseline_timed_alone_is_as_fast_as_itself(evaluator):
    """On a GPU no other test shares, the baseline's time as a candidate is its time as the
    baseline within 10%."""
    task = tasks.load("softmax")
    result = evaluator.evaluate(candidate.parse(task.baseline_source, task))
    assert result.verdict == Verdict.OK, result.message
    assert result.speedup == pytest.approx(1.0, rel=0.1)


@pytest.mark.parametrize("task_name,path,expected", corpus(), ids=[p.stem for _, p, _ in corpus()])
def test_adversary_gets_its_verdict_and_evaluator_recovers(evaluator, task_name, path, expected):
    task = tasks.load(task_name)
    good_kernel = candidate.parse(task.baseline_source, task)
    if expected == "TIMEOUT":  # the task prepared first: the time below is the hang's and its kill's alone
        evaluator.evaluate(good_kernel)
    started = time.monotonic()
    result = evaluator.evaluate(parse(task_name, path))
    elapsed = time.monotonic() - started
    assert result.verdict == Verdict(expected), f"{path.name}: {result.verdict} {result.message[:400]}"
    if expected == "CRASH":  # one clean line: the CUDA error and what it means
        assert "\n" not in result.message and "Traceback" not in result.message, result.message
        assert ".py" not in result.message and "CUDA" in result.message, result.message
    # the same evaluator still judges a good kernel right afterwards (after a crash or a hang, in a new child)
    started = time.monotonic()
    good = evaluator.evaluate(good_kernel)
    recovered_s = time.monotonic() - started
    assert good.verdict == Verdict.OK, good.message
    if expected == "TIMEOUT":  # reported at its timeout: the kill took less than a new child and its first evaluation
        assert elapsed < HANG_TIMEOUT_S + recovered_s, \
            f"hang reported after {elapsed:.1f} s, the next evaluation took {recovered_s:.1f} s"


def test_same_kernel_twice_gives_close_medians(evaluator):
    task = tasks.load("softmax")
    path = ROOT / "examples" / "softmax_fast.cu"
    source = path.read_text() if path.exists() else task.baseline_source
    first = evaluator.evaluate(candidate.parse(source, task))
    second = evaluator.evaluate(candidate.parse(source, task))
    assert first.verdict == second.verdict == Verdict.OK, first.message + second.message
    assert first.timing and second.timing
    shared = gpu_sharers() > 1  # other workers' kernels beside them
    assert abs(first.timing.median_us - second.timing.median_us) / first.timing.median_us < (0.1 if shared else 0.02)


@pytest.fixture(scope="module")
def baselines(request, bench_evaluator):
    """The session's evaluator of every task, the baselines of this worker's run of the every-task
    tests compiled ahead. Under a spread -n these run task by task, each beside the other tests
    of its task on that evaluator (xdist_gpus.BY_TASK), so this builds again at each return to the
    module and compiles only what it has not."""
    precompile(bench_evaluator, [candidate.parse(tasks.load(name).baseline_source, tasks.load(name))
                                 for (name,) in run_params(request, "task_name")])
    return bench_evaluator


@pytest.mark.parametrize("task_name", tasks.list_tasks())
def test_every_task_baseline_is_ok(baselines, task_name):
    """At the benchmark size. The template's default (every switch off, the tunables at their
    defaults) is the all-off case of test_template_combinations.py, judged there on the same
    session evaluator."""
    task = tasks.load(task_name)
    result = baselines.evaluate(candidate.parse(task.baseline_source, task))
    assert result.verdict == Verdict.OK, f"{task_name}: {result.message[:400]}"
    assert result.timing and result.timing.ceiling_fraction < 1.1


def test_an_honest_wgmma_gemm_is_ok_on_an_sm_90_device(bench_evaluator):
    """fsr compiles code that only sm_90a assembles for sm_90a on an sm_90 device: a wgmma kernel (one m64n64k16 a
    step, operands from shared-memory descriptors) compiles, runs and is right at every size."""
    if bench_evaluator.device().arch != "sm_90":
        pytest.skip(f"wgmma needs an sm_90 device, not {bench_evaluator.device().arch}")
    path = ROOT / "tests" / "data" / "wgmma" / "gemm_bf16_wgmma.cu"
    result = bench_evaluator.evaluate(parse("gemm_bf16", path))
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


def test_library_and_torch_eager_are_timed_like_the_candidates(evaluator):
    task = tasks.load("softmax")
    result = evaluator.evaluate(candidate.parse(task.baseline_source, task))
    assert result.verdict == Verdict.OK, result.message
    # both far faster than the one-thread-per-row baseline (about 4.7 ms on an H200)
    assert result.library_us and result.torch_us and result.baseline_us
    assert 0 < result.torch_us < result.baseline_us / 4 and 0 < result.library_us < result.baseline_us
