"""Seeded whole combinations of every task's feature template (switches and tunables), and paths
the sample may miss, on a real GPU: each OK at every test size, and timed, every timed run checked,
at the largest test size. The benchmark size is checked where the combinations are about it, every
switch off and every switch on (test_template_combinations.py); these are about the switches'
code, which runs at every test size, so their tasks are prepared without the benchmark size's
float64 references (8192^3 products, 4096-token attention) on the host."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fsr import candidate, tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Verdict, WorkerSpec
from tests.support.gpu_evaluators import at_test_sizes, precompile
from tests.support.templates import extremes, sample
from tests.support.xdist_gpus import PerRun, host_threads, run_params, shared_budget

pytestmark = pytest.mark.gpu
RANDOM_PER_TASK = 4  # as test_template_combinations.py: the same seeded sample
SEED = 1


def template(name: str):
    task = tasks.load(name)
    return candidate.parse(task.template_source or "", task)


# Paths the sample may miss: scan's bulk-copied tiles at the 96 KiB cap (ITEMS cut to fit, two
# buffers), and three-warp blocks on the register path
PATHS = [("scan", {"SMEM_TILE": 1, "DOUBLE_BUFFER": 1, "BLOCK": 512, "ITEMS": 128}),
         ("scan", {"SMEM_TILE": 1, "BLOCK": 96, "ITEMS": 128, "IN_ORDER": 1, "LOOKBACK_WARP": 1}),
         ("scan", {"STRIPED": 1, "VEC4": 1, "BLOCK": 96, "ITEMS": 96, "LOOKBACK_BLOCK": 1})]

CASES = [(name, values) for name in tasks.list_tasks() if tasks.load(name).template_source
         for values in sample(template(name), SEED, RANDOM_PER_TASK) if values not in extremes(template(name))] + PATHS


def run_evaluator(request: pytest.FixtureRequest, contents_dir: Path) -> GpuEvaluator:
    """Every task with a combination in the asking test's run of the module (xdist_gpus.run_params),
    at its test sizes (tests.support.gpu_evaluators.at_test_sizes), built ahead; torch.compile
    off; the run's combinations compiled ahead."""
    cases = run_params(request, "name", "values")
    small = [at_test_sizes(tasks.load(name)) for name in dict.fromkeys(name for name, _ in cases)]
    config = Config(eval=EvalConfig(torch_compile="off", host_threads=host_threads(),
                                    prepared_max_bytes=shared_budget(), contents_cache_dir=str(contents_dir)),
                    tune=TuneConfig(trials=0))
    ev = GpuEvaluator(WorkerSpec.of(config, small, warm=True))
    precompile(ev, [candidate.with_defines(template(name), values) for name, values in cases])
    return ev


@pytest.fixture(scope="module")
def evaluators(contents_dir: Path) -> Iterator[PerRun[GpuEvaluator]]:
    """The evaluator of this worker's run of the module, one run at a time: a worker handed a
    second run builds again for its tasks (xdist_gpus.run_name; two runs of four on one worker
    found the first run's evaluator without the second's tasks, on two H200s, eight workers)."""
    runs = PerRun(lambda request: run_evaluator(request, contents_dir), GpuEvaluator.close)
    yield runs
    runs.done()


@pytest.fixture
def evaluator(request: pytest.FixtureRequest, evaluators: PerRun[GpuEvaluator]) -> GpuEvaluator:
    return evaluators.get(request)


@pytest.mark.parametrize("name,values", CASES,
                         ids=[f"{n}-{'-'.join(f'{k}{v}' for k, v in sorted(c.items()))}" for n, c in CASES])
def test_template_combination_is_ok_at_the_test_sizes(evaluator, name, values):
    task = evaluator.spec.task(name)
    assert task is not None and task.bench_size in task.test_sizes  # held to its test sizes
    cand = candidate.with_defines(candidate.parse(task.template_source or "", task), values)
    result = evaluator.evaluate(cand, tune=False)
    assert result.verdict == Verdict.OK, f"{name} {values}: {result.verdict} {result.message[:400]}"
