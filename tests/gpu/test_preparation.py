"""Preparing tasks on a real GPU: a task's setup (benchmark inputs, float64 references, uploads,
the baseline's timing) is paid by its first evaluation only, built ahead when the campaign names
the task, prepared again when the device budget dropped it; a task without a baseline is timed
against PyTorch eager alone. torch.compile is off throughout: its compile would be most of each
preparation here and none of what these tests check."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from fsr import candidate, tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Task, Verdict, WorkerSpec
from tests.support.gpu_evaluators import spec
from tests.support.xdist_gpus import host_threads, shared_budget

pytestmark = pytest.mark.gpu
CONFIG = Config(eval=EvalConfig(torch_compile="off", host_threads=host_threads(), prepared_max_bytes=shared_budget()),
                tune=TuneConfig(trials=0))


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Task:
    """softmax as `fsr import` would leave it: no baseline.cu, no template.cu."""
    from fsr.testing.fakes import without_baseline

    return without_baseline(tasks.load("softmax"), tmp_path_factory.mktemp("bare"))


@pytest.fixture(scope="module")
def evaluator(bare: Task) -> Iterator[GpuEvaluator]:
    """layernorm and the bare softmax, nothing built ahead; each task is used by one test alone,
    so that test's first evaluation is its task's first in this evaluator."""
    ev = GpuEvaluator(WorkerSpec((tasks.load("layernorm"), bare), CONFIG.eval, CONFIG.tune,
                                 host_threads=CONFIG.eval.host_threads))
    yield ev
    ev.close()


def test_task_setup_is_paid_by_its_first_evaluation_only(evaluator):
    task = tasks.load("layernorm")
    first = evaluator.evaluate(candidate.parse(task.baseline_source, task))
    second = evaluator.evaluate(candidate.parse(task.baseline_source, task))
    assert first.verdict == second.verdict == Verdict.OK, first.message + second.message
    # the first pays the references at 8192 x 8192, the uploads and the baseline's timing; the
    # second a lookup, far less than a twentieth of that
    assert 20 * second.setup_s < first.setup_s < first.wall_s, (first.setup_s, second.setup_s)


def test_a_task_without_baseline_is_timed_against_pytorch_eager_only(evaluator, bare):
    """An imported task has no baseline.cu: preparing it times no baseline, and a correct kernel
    is OK with no baseline time (so no speedup over one) and PyTorch eager's time beside it."""
    softmax = tasks.load("softmax")
    result = evaluator.evaluate(candidate.parse(softmax.baseline_source, bare))
    assert result.verdict == Verdict.OK, result.message
    assert result.baseline_us is None and result.speedup is None
    assert result.timing is not None and result.timing.median_us > 0


def test_warm_tasks_are_prepared_before_their_first_candidate():
    """A campaign's tasks named up front are built while the child waits for work (a name of no
    task of the campaign among them is ignored): the same first evaluation, in a child told to
    build the task ahead and in one that was not, both idle as long before it."""
    task = tasks.load("layernorm")
    cold_warm = ((), ("layernorm", "no-such-task"))
    evaluators = {warm: GpuEvaluator(spec(CONFIG, ("layernorm",), warm=warm)) for warm in cold_warm}
    try:
        for ev in evaluators.values():
            ev.device()  # one child at a time measures the device's ceilings
        time.sleep(8.0)  # both idle: the warm build (about 2-3 s) runs meanwhile, and both import PyTorch
        setup = {}
        for warm, ev in evaluators.items():
            result = ev.evaluate(candidate.parse(task.baseline_source, task))
            assert result.verdict == Verdict.OK, result.message
            setup[warm] = result.setup_s
    finally:
        for ev in evaluators.values():
            ev.close()
    cold, warmed = setup.values()
    assert warmed < cold - 0.5, setup


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


def test_a_warm_tasks_test_inputs_are_made_with_its_contents_and_taken_by_its_preparation():
    """The child starts a warm task's test inputs with its benchmark contents (PoolsAhead), so the
    first checks of its first candidate (its baseline's, inside the preparation that holds the GPU)
    find their inputs and float64 references made; the preparation takes that pool, and a later
    one (the task dropped and prepared again) starts its own."""
    from fsr.evaluate.gpu.child import Child

    child = Child(spec(CONFIG, ("layernorm",), warm=("layernorm",)))
    try:
        task = child.task("layernorm")
        end = time.monotonic() + 120.0
        while not child.contents.ensure(task) and time.monotonic() < end:
            time.sleep(0.05)
        waiting = child.ahead._pools.get("layernorm")
        assert waiting is not None, "no test inputs started with the contents"
        while time.monotonic() < end:
            with waiting.cond:
                if all(len(q) >= d for q, d in zip(waiting.items, waiting.depths, strict=True)):
                    break
            time.sleep(0.05)
        else:
            pytest.fail("the test inputs started ahead were not made within two minutes")
        child.prepare("layernorm", "")
        state = child.tasks.get("layernorm")
        assert state is not None and state.pool is waiting and "layernorm" not in child.ahead._pools
    finally:
        prepared = child.tasks.get("layernorm")
        if prepared is not None:
            prepared.close()
        child.compiles.compiler.close()  # a campaign's child started its compile processes
