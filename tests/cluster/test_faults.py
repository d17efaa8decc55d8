"""Cluster faults on the local two-node cluster with fake GPUs: a worker lost for any reason of
the machinery costs no candidate a verdict; its work is re-queued and done elsewhere, and the
user gets one line. Only a candidate running on several losses in a row is blamed."""

from __future__ import annotations

import os
import signal
import time

import pytest
import ray
from ray.exceptions import (
    ActorDiedError,
    ActorUnavailableError,
    NodeDiedError,
    ObjectLostError,
    OutOfMemoryError,
    OwnerDiedError,
    RaySystemError,
    WorkerCrashedError,
)

from cluster.executor import NoWorkerError, RayExecutor
from cluster.faults import describe_loss
from cluster.slot import Call
from cluster.testing import (
    EXIT_MARK,
    HANG_MARK,
    RAISE_MARK,
    SLOW_MARK,
    FailOnceEvaluatorFactory,
    MarkedEvaluatorFactory,
    candidates,
)
from fsr.types import Evaluation, Verdict
from tests.cluster.conftest import RAY_WAIT_S, collect

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("ray_cluster")]


def by_id(evaluations: list[Evaluation]) -> dict[str, Evaluation]:
    assert len({e.candidate_id for e in evaluations}) == len(evaluations), "a candidate came back twice"
    return {e.candidate_id: e for e in evaluations}


def test_a_worker_process_killed_mid_evaluation_costs_no_verdict_and_its_calls_are_redone(make):
    ex = make(num_workers=1)
    (probe,) = candidates(1, task="probe")
    ex.submit(probe)
    pid = int(collect(ex, 1)[0].message.split()[-1])
    # both slow: the actor runs calls on two threads and either may take the evaluator first;
    # at the kill one is running and the other waits for it, so both are unanswered
    slow, behind = candidates(2, mark=SLOW_MARK)
    ex.submit(slow)
    ex.submit(behind)
    time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    got = by_id(collect(ex, 2))
    assert all(e.verdict == Verdict.OK for e in got.values()), [e.message for e in got.values()]
    assert all(str(pid) not in e.message for e in got.values())  # redone by the replacement
    (stats,) = ex.workers().stats
    assert (stats.lost, stats.requeued, stats.crashes, stats.restarts, stats.state) == (1, 2, 0, 1, "ready")
    (line,) = ex.workers().notices
    assert "w00" in line and "its process died" in line and "2 evaluations re-queued" in line


def test_a_candidate_running_on_every_one_of_several_worker_deaths_is_blamed_with_crash(make):
    ex = make(num_workers=1, poison_after=3, restart_backoff_s=0.1)
    ex.workers(RAY_WAIT_S)
    (killer,) = candidates(1, mark=EXIT_MARK)
    innocent = candidates(2)
    for c in [killer, *innocent]:
        ex.submit(c)
    got = by_id(collect(ex, 3))
    assert got[killer.id].verdict == Verdict.CRASH
    assert "3 in a row" in got[killer.id].message and got[killer.id].device == "FakeGPU"
    assert all(got[c.id].verdict == Verdict.OK for c in innocent)
    (stats,) = ex.workers().stats
    assert (stats.lost, stats.crashes, stats.restarts) == (3, 1, 3)
    notices = ex.workers().notices
    assert len(notices) == 3 and f"candidate {killer.id}" in notices[-1] and "CRASH" in notices[-1]
    assert all(f"candidate {killer.id}" not in line for line in notices[:-1])


def test_a_hung_worker_is_killed_and_its_call_redone_until_it_hangs_every_time(make):
    ex = make(num_workers=1, call_timeout_s=1.5, poison_after=2, restart_backoff_s=0.1)
    ex.workers(RAY_WAIT_S)
    (hang,) = candidates(1, mark=HANG_MARK)
    (after,) = candidates(1)
    ex.submit(hang)
    ex.submit(after)
    got = by_id(collect(ex, 2))
    assert got[hang.id].verdict == Verdict.TIMEOUT and "no answer after" in got[hang.id].message
    assert got[after.id].verdict == Verdict.OK
    # the second kill's replacement may still be starting when the verdict is out: wait for it
    deadline = time.monotonic() + RAY_WAIT_S
    while ex.workers().stats[0].restarts < 2 and time.monotonic() < deadline:
        ex.poll(0.1)
    (stats,) = ex.workers().stats
    assert (stats.lost, stats.timeouts, stats.restarts) == (2, 1, 2)


def test_an_evaluator_that_raises_is_the_workers_fault_until_the_candidate_is_poison(make):
    ex = make(num_workers=1, poison_after=2, restart_backoff_s=0.1)
    ex.workers(RAY_WAIT_S)
    (bad,) = candidates(1, mark=RAISE_MARK)
    good = candidates(2)
    for c in [bad, *good]:
        ex.submit(c)
    got = by_id(collect(ex, 3))
    assert got[bad.id].verdict == Verdict.CRASH and "RuntimeError: evaluator bug" in got[bad.id].message
    assert all(got[c.id].verdict == Verdict.OK for c in good)
    assert ex.workers().stats[0].lost == 2


def test_a_slot_that_keeps_failing_is_retired_without_blaming_any_candidate(make):
    ex = make(num_workers=1, max_consecutive_failures=2, poison_after=5, restart_backoff_s=0.1)
    ex.workers(RAY_WAIT_S)
    for c in candidates(3, mark=EXIT_MARK):
        ex.submit(c)
    got: list[Evaluation] = []
    deadline = time.monotonic() + RAY_WAIT_S
    with pytest.raises(NoWorkerError, match="all 1 GPU workers failed repeatedly"):
        while time.monotonic() < deadline:
            got += ex.poll(1.0)
    assert got == []  # no verdict: the candidates were not yet shown to be the cause
    assert ex.workers().stats[0].state == "retired"
    assert "retired after 3 failures in a row" in ex.workers().notices[-1]


class FlakyRayExecutor(RayExecutor):
    """Fails the first fetch of each marked candidate's result with an injected Ray error, as
    when an RPC or the object store fails under a healthy actor."""

    error: Exception = RaySystemError("injected")
    failed: dict[str, object] = {}  # candidate id -> the call ref whose result is "lost"

    def _fetch(self, call: Call) -> tuple[Evaluation, float]:
        if SLOW_MARK in call.candidate.source and self.failed.setdefault(call.candidate.id, call.ref) is call.ref:
            raise self.error
        return super()._fetch(call)


@pytest.mark.parametrize("error", [
    ObjectLostError("ab" * 14, None, "test"),
    ActorUnavailableError("injected: RpcError: Socket closed", None),
    RaySystemError("injected system error"),
], ids=lambda e: type(e).__name__)
def test_rpc_and_object_store_errors_redo_the_evaluation_on_a_new_worker(make, error):
    FlakyRayExecutor.error, FlakyRayExecutor.failed = error, {}
    ex = make(FlakyRayExecutor, num_workers=1)
    (marked,) = candidates(1, mark=SLOW_MARK)
    ex.submit(marked)
    (ev,) = collect(ex, 1)
    assert ev.verdict == Verdict.OK and list(FlakyRayExecutor.failed) == [marked.id]
    (stats,) = ex.workers().stats
    assert (stats.lost, stats.requeued, stats.crashes, stats.restarts) == (1, 1, 0, 1)
    (line,) = ex.workers().notices
    assert type(error).__name__ in line and "1 evaluation re-queued" in line


def test_a_lost_node_blames_no_candidate_and_its_work_is_redone_elsewhere(ray_cluster, make):
    node = ray_cluster.add_node(num_cpus=1, num_gpus=1)  # a fifth GPU, on a node that will go
    ray_cluster.wait_for_nodes()
    try:
        ex = make(num_workers=5, evaluator_factory=MarkedEvaluatorFactory(latency_s=1.0))
        assert len(ex.workers(RAY_WAIT_S).devices) == 5
        cands = candidates(10)
        for c in cands:
            ex.submit(c)
        time.sleep(0.3)
    finally:
        ray_cluster.remove_node(node)
    got = by_id(collect(ex, 10))
    assert set(got) == {c.id for c in cands}
    assert all(e.verdict == Verdict.OK for e in got.values()), [e.message for e in got.values()]
    stats = ex.workers().stats
    assert sum(w.crashes for w in stats) == 0 and sum(w.lost for w in stats) == 1
    (line,) = [n for n in ex.workers().notices if "lost" in n]
    assert "re-queued" in line


@ray.remote(num_gpus=1, num_cpus=0)
class GpuHolder:
    def ready(self) -> bool:
        return True


def test_a_worker_that_cannot_be_placed_waits_while_the_others_work(make):
    holder = GpuHolder.remote()  # type: ignore[attr-defined]
    ray.get(holder.ready.remote(), timeout=RAY_WAIT_S)
    try:
        ex = make(num_workers=4, stuck_after_s=4.0)
        deadline = time.monotonic() + RAY_WAIT_S
        while sum(w.state == "ready" for w in ex.workers().stats) < 3 and time.monotonic() < deadline:
            ex.poll(0.2)
        cands = candidates(8)
        for c in cands:
            ex.submit(c)
        got = by_id(collect(ex, 8))
        assert all(e.verdict == Verdict.OK for e in got.values())
        time.sleep(4.0)
        ex.poll(0.1)
        (waiting,) = [w for w in ex.workers().stats if w.state != "ready"]
        assert waiting.state == "starting" and waiting.name not in {e.worker for e in got.values()}
        assert any(waiting.name in line and "has not started" in line for line in ex.workers().notices)
    finally:
        ray.kill(holder)
    assert len(ex.workers(RAY_WAIT_S).devices) == 4  # placed once a GPU is free


def test_waiting_for_the_workers_includes_one_being_started_again_after_a_failed_start(make, tmp_path):
    ex = make(evaluator_factory=FailOnceEvaluatorFactory(str(tmp_path / "failed")), num_workers=1)
    workers = ex.workers(RAY_WAIT_S)
    assert (tmp_path / "failed").exists()  # the first start did fail
    assert len(workers.devices) == 1, workers.notices
    assert any("failed to start" in line for line in workers.notices)


class NodeRemover:
    """A progress view that removes a node once `after` evaluations are in (a node lost
    mid-campaign, at a point the test chooses)."""

    def __init__(self, cluster, node, after: int) -> None:
        self.cluster, self.node, self.after = cluster, node, after

    def update(self, progress) -> None:
        if self.node is not None and progress.evaluations >= self.after:
            self.cluster.remove_node(self.node)
            self.node = None

    def close(self, progress) -> None:
        pass

    def note(self, text: str) -> None:
        pass


def test_a_campaign_that_loses_every_worker_stops_in_one_line_and_resumes_to_its_budget(
        ray_cluster, make, tmp_path):
    from fsr.config import SearchConfig
    from fsr.lineage import LineageWriter, read
    from fsr.propose.mutate import MutateProposer
    from fsr.search.loop import run_campaign
    from fsr.testing.fakes import softmax_task

    holders = [GpuHolder.remote() for _ in range(4)]  # type: ignore[attr-defined]
    ray.get([h.ready.remote() for h in holders], timeout=RAY_WAIT_S)  # every GPU of the session is taken
    node = ray_cluster.add_node(num_cpus=1, num_gpus=1)  # the worker's, to be lost
    ray_cluster.wait_for_nodes()
    config = SearchConfig(max_evaluations=16, seed=3)
    factory = MarkedEvaluatorFactory(latency_s=0.2)
    try:
        ex = make(num_workers=1, start_timeout_s=2.0, evaluator_factory=factory)
        assert len(ex.workers(RAY_WAIT_S).devices) == 1  # started (on the new node) before the clock runs
        with LineageWriter(tmp_path) as writer, pytest.raises(NoWorkerError) as info:
            run_campaign([softmax_task()], ex, MutateProposer(), config, writer, NodeRemover(ray_cluster, node, 4))
        assert "no GPU worker left" in str(info.value) and "\n" not in str(info.value)
    finally:
        for h in holders:
            ray.kill(h)
    first = read(tmp_path).to_pylist()
    assert 4 <= len(first) < 16 and all(r["verdict"] == "OK" for r in first)
    with LineageWriter(tmp_path) as writer:
        run_campaign([softmax_task()], make(num_workers=2, evaluator_factory=factory), MutateProposer(),
                     config, writer, resume=tmp_path)
    rows = read(tmp_path).to_pylist()
    assert len(rows) == 16 and len({r["candidate_id"] for r in rows}) == 16
    assert [r["candidate_id"] for r in rows[:len(first)]] == [r["candidate_id"] for r in first]


def test_the_run_summary_names_a_lost_worker_and_its_requeued_evaluations(make):
    from fsr.commands.run import _worker_lines

    ex = make(num_workers=1)
    (probe,) = candidates(1, task="probe")
    ex.submit(probe)
    pid = int(collect(ex, 1)[0].message.split()[-1])
    assert "lost" not in _worker_lines(ex.workers().stats)[0]
    ex.submit(candidates(1, mark=SLOW_MARK)[0])
    time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    collect(ex, 1)
    (line,) = _worker_lines(ex.workers().stats)
    assert "2 evaluations, " in line and "lost 1 time (1 evaluations re-queued), 0 crashed" in line


@pytest.mark.parametrize("error,words", [
    (ActorDiedError(), "its process died (ActorDiedError)"),
    (WorkerCrashedError(), "its process died (WorkerCrashedError)"),
    (ActorUnavailableError("RpcError: Socket closed", None), "it cannot be reached (ActorUnavailableError)"),
    (NodeDiedError("gone"), "its node 10.0.0.2 is gone (NodeDiedError)"),
    (OwnerDiedError("ab" * 14, None, "x"), "its result was lost from the object store (OwnerDiedError)"),
    (OutOfMemoryError("oom"), "lack of host memory (OutOfMemoryError)"),
    (RaySystemError("x"), "Ray failed (RaySystemError)"),
], ids=lambda x: type(x).__name__ if isinstance(x, Exception) else "")
def test_each_kind_of_loss_is_named_in_fsrs_words_with_rays_class(error, words):
    assert describe_loss(error, "10.0.0.2", node_gone=False).endswith(words)
    assert describe_loss(error, "10.0.0.2", node_gone=True) == f"its node 10.0.0.2 is gone ({type(error).__name__})"
