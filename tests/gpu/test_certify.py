"""Certification on a real GPU: honest kernels certify (untuned, tuned, and in a campaign, where
only certified results lead); a kernel that keys on fsr's predictable benchmark sets passes
screening faster than its honest twin and fails certification, on timing where it falls back to
honest work on inputs it does not recognise, on its timed outputs where it does not.

The cheats recognise the benchmark sets a GPU child builds for screening (from `eval.seed` and the
task's content hash: fsr.evaluate.gpu.child.Child._contents) by four probe values, and carry the
histogram of the first half of each set, so they count only the second half: about twice as
fast, right on every screened run, plausible. Each test first checks that screening is fooled, so
the channel the certification closes is shown open there."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from fsr import candidate, certification, tasks
from fsr.config import Config, EvalConfig, SearchConfig, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.execute.local import LocalExecutor
from fsr.lineage import LineageWriter, read
from fsr.propose.mutate import MutateProposer
from fsr.search.loop import run_campaign
from fsr.testing.fakes import softmax_task
from fsr.types import Evaluation, Verdict, WorkerSpec
from tests.support.certifying import certified
from tests.support.xdist_gpus import shared_budget

pytestmark = pytest.mark.gpu

HISTOGRAM = tasks.load("histogram")
CONFIG = Config(eval=EvalConfig(torch_compile="off", prepared_max_bytes=shared_budget()), tune=TuneConfig(trials=0))
PROBES = ("x[0]", "x[1]", "x[n / 2 + 1]", "x[n - 1]")

CHEAT = r"""/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "seed_counts"
grid = ["cdiv(bins, BLOCK)"]
block = ["BLOCK"]
args = ["x", "counts", "n", "bins"]

[[launch]]
kernel = "count_rest"
grid = ["cdiv(n, BLOCK)"]
block = ["BLOCK"]
args = ["x", "counts", "n", "bins"]
*/
#define SETS %(sets)d
#define BENCH_N %(n)d
#define BENCH_BINS %(bins)d
__device__ const int PROBE[SETS][4] = {%(probes)s};
__device__ const int MEMO[SETS][BENCH_BINS] = {%(memo)s};
__device__ int known;  // seed_counts recognised the set: read by count_rest, launched after it

// Which of fsr's screening benchmark sets x is, by four probe values (-1: none).
__device__ __forceinline__ int recognise(const int* x, int n, int bins) {
    if (n != BENCH_N || bins != BENCH_BINS) return -1;
    for (int s = 0; s < SETS; ++s)
        if (%(match)s) return s;
    return -1;
}

// The first half's histogram from memory where the set is recognised, else zero.
extern "C" __global__ void seed_counts(const int* x, int* counts, int n, int bins) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= bins) return;
    int s = recognise(x, n, bins);
    if (b == 0) known = s >= 0;
    counts[b] = s >= 0 ? MEMO[s][b] : 0;
}

extern "C" __global__ void count_rest(const int* x, int* counts, int n, int bins) {
    __shared__ int start;
    if (threadIdx.x == 0) start = %(start)s;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= start && i < n) atomicAdd(&counts[x[i]], 1);
}
"""
FALLS_BACK = "known ? n / 2 : 0"  # honest work on inputs it does not know (recognised once, not per block)
ASSUMES = "(n == BENCH_N && bins == BENCH_BINS) ? n / 2 : 0"  # every benchmark-size input is one it knows


def screening_sets(task: tasks.Task, config: Config) -> list[np.ndarray]:
    """The benchmark inputs a GPU child screens `task` on: its screening sets' seeds."""
    from fsr.evaluate.gpu.inputs import screening_seeds  # the GPU child's side: CuPy

    seeds = screening_seeds(task, config.eval.seed, config.eval.input_sets)
    module = tasks.functions(task)
    return [module.make_inputs(dict(task.bench_size), np.random.default_rng(s))["x"] for s in seeds]


def cheat(start: str, sets: list[np.ndarray]) -> candidate.Candidate:
    """The cheat of CHEAT keyed on `sets` (`screening_sets`), counting from `start`."""
    n, bins = dict(HISTOGRAM.bench_size)["n"], dict(HISTOGRAM.bench_size)["bins"]
    at = (0, 1, n // 2 + 1, n - 1)
    probes = ", ".join("{" + ", ".join(str(int(x[i])) for i in at) + "}" for x in sets)
    memo = ", ".join("{" + ", ".join(map(str, np.bincount(x[: n // 2], minlength=bins))) + "}" for x in sets)
    match = " && ".join(f"{p} == PROBE[s][{k}]" for k, p in enumerate(PROBES))
    source = CHEAT % {"sets": len(sets), "n": n, "bins": bins, "probes": probes, "memo": memo, "match": match,
                      "start": start}
    return candidate.parse(source, HISTOGRAM)


@pytest.fixture(scope="module")
def screened_inputs() -> list[np.ndarray]:
    """Histogram's screening sets, drawn once for the module's cheats (three sets of 2^27 values
    at its benchmark size: seconds of host time each time)."""
    return screening_sets(HISTOGRAM, CONFIG)


@pytest.fixture(scope="module")
def evaluator() -> Iterator[GpuEvaluator]:
    ev = GpuEvaluator(WorkerSpec.of(CONFIG, [HISTOGRAM]))
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def honest(evaluator: GpuEvaluator) -> Evaluation:
    result = evaluator.evaluate(candidate.parse(HISTOGRAM.baseline_source, HISTOGRAM))
    assert result.verdict == Verdict.OK and result.timing is not None, result.message
    return result


def certify(evaluator: GpuEvaluator, cand: candidate.Candidate, screened: Evaluation) -> Evaluation:
    """`cand` certified against `screened` (again where a shared GPU's noise failed it on timing)."""
    return certified(evaluator, certification.request(cand, screened), screened)


def test_the_honest_twin_certifies(evaluator: GpuEvaluator, honest: Evaluation) -> None:
    base = candidate.parse(HISTOGRAM.baseline_source, HISTOGRAM)
    got = certify(evaluator, base, honest)
    assert got.verdict == Verdict.OK and got.certified is True, got.message
    assert got.timing is not None and honest.timing is not None
    assert got.control_us is not None  # its pair: timed on the screening's own sets right after the fresh one
    # checked at every test size on fresh inputs, then its timed runs on a fresh benchmark set
    assert len(got.checks) == len(HISTOGRAM.test_sizes) + 1 and all(c.passed for c in got.checks)
    # the seed of every set it drew, by name, in the order taken: a replay draws them again
    assert [name for name, _ in got.certify_seeds] == list(certification.input_sets(HISTOGRAM))
    assert len({seed for _, seed in got.certify_seeds}) == len(got.certify_seeds)


# The screened cheat must be timed clearly faster than its twin (0.8x) before its certification is
# judged: beside other workers' kernels on the GPU the two timings read theirs (a 25.6 ms twin
# against 23.6 ms for the cheat on a one-H200 machine with six workers), so these run alone.
@pytest.mark.whole_machine
def test_a_kernel_keyed_on_the_screening_sets_is_screened_fast_and_fails_certification_on_timing(
        evaluator: GpuEvaluator, honest: Evaluation, screened_inputs: list[np.ndarray]) -> None:
    kernel = cheat(FALLS_BACK, screened_inputs)
    screened = evaluator.evaluate(kernel)
    assert screened.verdict == Verdict.OK and screened.timing is not None, screened.message
    assert honest.timing is not None
    assert screened.timing.median_us < 0.8 * honest.timing.median_us, "screening was not fooled: no channel shown"
    got = certify(evaluator, kernel, screened)
    assert got.verdict == Verdict.UNCERTIFIED and got.certified is False and got.failed_check == "timing", got.message
    assert "on fsr's screening inputs, timed right after in the same load" in got.message


@pytest.mark.whole_machine  # timed against its twin, as above
def test_a_kernel_that_assumes_every_benchmark_input_is_known_fails_its_timed_runs_on_fresh_inputs(
        evaluator: GpuEvaluator, honest: Evaluation, screened_inputs: list[np.ndarray]) -> None:
    kernel = cheat(ASSUMES, screened_inputs)
    screened = evaluator.evaluate(kernel)
    assert screened.verdict == Verdict.OK and screened.timing is not None, screened.message
    assert honest.timing is not None and screened.timing.median_us < 0.8 * honest.timing.median_us
    got = certify(evaluator, kernel, screened)
    assert got.verdict == Verdict.UNCERTIFIED and got.failed_check == "timed runs on fresh inputs", got.message
    assert "(WRONG)" in got.message


def test_a_tuned_kernel_certifies_at_the_defines_its_tuning_chose() -> None:
    task = softmax_task()
    assert task.template_source is not None
    ev = GpuEvaluator(WorkerSpec.of(Config(eval=EvalConfig(torch_compile="off", prepared_max_bytes=shared_budget()), tune=TuneConfig(trials=4)), [task]))
    try:
        cand = candidate.parse(task.template_source, task)
        screened = ev.evaluate(cand)
        assert screened.verdict == Verdict.OK and screened.tune_trials > 0, screened.message
        request = certification.request(cand, screened)
        assert dict(request.resolved_defines()) == dict(screened.tuned_defines)
        got = certified(ev, request, screened)
        assert got.verdict == Verdict.OK and got.certified is True, got.message
    finally:
        ev.close()


@pytest.mark.parametrize("mode", ["leads", "end"])
def test_a_campaign_on_the_gpu_counts_certified_results_only(tmp_path, mode: str) -> None:
    task = softmax_task()
    spec = WorkerSpec.of(Config(eval=EvalConfig(torch_compile="off", prepared_max_bytes=shared_budget()), tune=TuneConfig(trials=2)), [task])
    executor = LocalExecutor(lambda: GpuEvaluator(spec, beside=True, campaign=True), max_in_flight=2)
    try:
        with LineageWriter(tmp_path) as writer:
            summary = run_campaign([task], executor, MutateProposer(), SearchConfig(max_evaluations=8, seed=1),
                                   writer, certify=mode)
    finally:
        executor.close()
    rows = read(tmp_path).to_pylist()
    screened = [r for r in rows if r["tier"] == "screen"]
    passed = certification.certified_ids(rows)
    assert len(screened) == 8 == summary.evaluations and passed
    assert summary.tasks[0].best_id in passed
