"""RayExecutor on a two-node local cluster with four fake GPUs: scheduling, faults, pinning."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from cluster.executor import NoWorkerError, RayExecutor
from fsr.types import Evaluation, Verdict
from tests.cluster.evaluators import EXIT_MARK, HANG_MARK, RAISE_MARK, MarkedEvaluatorFactory, candidates
from tests.contract.executor_contract import ExecutorContract

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("ray_cluster")]


def collect(ex: RayExecutor, count: int, timeout_s: float = 60.0) -> list[Evaluation]:
    out: list[Evaluation] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        out += ex.poll(1.0)
    assert len(out) == count, f"{len(out)} of {count} evaluations came back"
    return out


@pytest.fixture
def make():
    made: list[RayExecutor] = []

    def build(**kwargs) -> RayExecutor:
        kwargs.setdefault("evaluator_factory", MarkedEvaluatorFactory())
        made.append(RayExecutor(**kwargs))
        return made[-1]

    yield build
    for ex in made:
        ex.close()


class TestRayExecutorContract(ExecutorContract):
    timeout_s = 60.0

    def make_executor(self) -> RayExecutor:
        return RayExecutor(MarkedEvaluatorFactory(latency_s=0.01), num_workers=2)


def test_every_gpu_gets_a_worker_and_no_worker_holds_more_than_two_calls(make):
    ex = make(evaluator_factory=MarkedEvaluatorFactory(latency_s=0.2))
    assert ex.free_slots() == 8  # 4 GPUs in the cluster x 2 calls each
    cands = candidates(24)
    submitted, got = 0, list[Evaluation]()
    while len(got) < len(cands):
        while ex.free_slots() and submitted < len(cands):
            ex.submit(cands[submitted])
            submitted += 1
        assert all(w.in_flight <= 2 for w in ex.worker_stats())
        got += ex.poll(5.0)
    assert sorted(e.candidate_id for e in got) == sorted(c.id for c in cands)
    assert all(e.verdict == Verdict.OK for e in got)
    workers = Counter(ex.worker_of(c.id) for c in cands)
    assert len(workers) == 4 and min(workers.values()) >= 3, workers
    assert len(ex.devices()) == 4


def test_a_worker_that_dies_costs_one_crash_verdict_and_is_replaced(make):
    ex = make(num_workers=1)
    ex.devices()
    (killer,) = candidates(1, mark=EXIT_MARK)
    queued_behind = candidates(2)
    for c in [killer, *queued_behind]:
        ex.submit(c)
    got = {e.candidate_id: e for e in collect(ex, 3)}
    assert got[killer.id].verdict == Verdict.CRASH
    assert "died" in got[killer.id].message and got[killer.id].device == "FakeGPU"
    # The calls queued behind it never ran on the dead actor: they are evaluated by its successor.
    assert all(got[c.id].verdict == Verdict.OK for c in queued_behind)
    later = candidates(3, task="later")
    for c in later:
        ex.submit(c)
    assert all(e.verdict == Verdict.OK for e in collect(ex, 3))
    (stats,) = ex.worker_stats()
    assert (stats.crashes, stats.restarts, stats.state) == (1, 1, "ready")
    assert stats.evaluations == 5


def test_a_hung_call_times_out_and_its_worker_is_killed_and_replaced(make):
    ex = make(num_workers=1, call_timeout_s=3.0)
    ex.devices()
    (hang,) = candidates(1, mark=HANG_MARK)
    (after,) = candidates(1)
    start = time.monotonic()
    ex.submit(hang)
    ex.submit(after)
    got = {e.candidate_id: e for e in collect(ex, 2)}
    assert got[hang.id].verdict == Verdict.TIMEOUT and "killed" in got[hang.id].message
    assert got[after.id].verdict == Verdict.OK
    assert time.monotonic() - start < 3.0 + 5.0
    (stats,) = ex.worker_stats()
    assert (stats.timeouts, stats.restarts, stats.state) == (1, 1, "ready")


def test_an_evaluator_that_raises_gives_a_crash_verdict_and_a_rebuilt_worker(make):
    ex = make(num_workers=1)
    ex.devices()
    (bad,) = candidates(1, mark=RAISE_MARK)
    good = candidates(2)
    for c in [bad, *good]:
        ex.submit(c)
    got = {e.candidate_id: e for e in collect(ex, 3)}
    assert got[bad.id].verdict == Verdict.CRASH
    assert "RuntimeError: evaluator bug" in got[bad.id].message
    assert all(got[c.id].verdict == Verdict.OK for c in good)
    (stats,) = ex.worker_stats()
    assert (stats.crashes, stats.restarts) == (1, 1)


def test_a_worker_that_keeps_failing_is_retired_and_then_the_executor_fails_loudly(make):
    ex = make(num_workers=1, max_consecutive_failures=2, restart_backoff_s=0.1)
    ex.devices()
    for c in candidates(3, mark=EXIT_MARK):
        ex.submit(c)
    got: list[Evaluation] = []
    with pytest.raises(NoWorkerError, match="all 1 GPU workers failed repeatedly"):
        for _ in range(60):
            got += ex.poll(1.0)
    assert [e.verdict for e in got] == [Verdict.CRASH] * 3
    assert ex.worker_stats()[0].state == "retired"


def test_a_task_stays_on_the_gpu_model_that_first_evaluated_it(make):
    ex = make(evaluator_factory=MarkedEvaluatorFactory(latency_s=0.05, models=("ModelA", "ModelB")))
    devices = ex.devices()
    assert Counter(d.name for d in devices.values()) == {"ModelA": 2, "ModelB": 2}
    model_of = {name: d.name for name, d in devices.items()}
    cands = candidates(12, task="softmax") + candidates(12, task="other")
    got: list[Evaluation] = []
    for i in range(0, len(cands), 6):  # in waves, so both models have free slots each time
        for c in cands[i:i + 6]:
            ex.submit(c)
        got += collect(ex, 6)
    for task in ("softmax", "other"):
        models = {e.device for e in got if e.task == task}
        workers = {model_of[ex.worker_of(c.id) or ""] for c in cands if c.task == task}
        assert len(models) == 1 and workers == models, (task, models, workers)


def test_a_task_pinned_to_a_model_no_worker_has_fails_loudly(make):
    ex = make()
    ex.devices()
    ex.pin("softmax", "H100 80GB HBM3")
    with pytest.raises(NoWorkerError, match="H100 80GB HBM3.*FakeGPU"):
        ex.submit(candidates(1)[0])


def test_more_workers_than_gpus_is_refused():
    with pytest.raises(NoWorkerError, match="5 GPU workers but the cluster has 4"):
        RayExecutor(MarkedEvaluatorFactory(), num_workers=5)


def test_workers_stay_busy_under_saturating_load(make):
    ex = make(evaluator_factory=MarkedEvaluatorFactory(latency_s=0.1))
    ex.devices()
    cands = iter(candidates(400))
    end = time.monotonic() + 4.0
    done = 0
    while time.monotonic() < end:
        for _ in range(ex.free_slots()):
            ex.submit(next(cands))
        done += len(ex.poll(0.5))
    busy = ex.busy_fraction()
    assert done >= 100
    assert busy > 0.9, busy


def test_a_lost_node_blames_no_candidate_and_its_work_is_redone_elsewhere(ray_cluster, make):
    node = ray_cluster.add_node(num_cpus=1, num_gpus=1)  # a fifth GPU, on a node that will go
    ray_cluster.wait_for_nodes()
    try:
        ex = make(num_workers=5, evaluator_factory=MarkedEvaluatorFactory(latency_s=1.0))
        assert len(ex.devices()) == 5
        cands = candidates(10)
        for c in cands:
            ex.submit(c)
        time.sleep(0.3)
    finally:
        ray_cluster.remove_node(node)
    got = collect(ex, 10)
    assert sorted(e.candidate_id for e in got) == sorted(c.id for c in cands)
    assert all(e.verdict == Verdict.OK for e in got), [e.message for e in got if e.verdict != Verdict.OK]
    stats = ex.worker_stats()
    assert sum(w.crashes for w in stats) == 0 and sum(w.restarts for w in stats) == 1
