"""LocalExecutor: one evaluator on a worker thread, built lazily; no Ray."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace

import pytest

from fsr.execute.local import EvaluatorUnavailable, LocalExecutor
from fsr.testing.executor_contract import ExecutorContract
from fsr.testing.fakes import FakeEvaluator, softmax_variants
from fsr.types import Candidate, DeviceInfo, Evaluation, Verdict
from tests.support.executors import drain


class TestLocalExecutorContract(ExecutorContract):
    timeout_s = 10.0

    def make_executor(self) -> LocalExecutor:
        return LocalExecutor(lambda: FakeEvaluator(sleep_s=0.01), max_in_flight=2)


@dataclass
class Recorder:
    """An evaluator that records on which thread and how concurrently it is used."""

    sleep_s: float = 0.02
    raise_on: str = ""
    threads: set[int] = field(default_factory=set)
    active: int = 0
    max_active: int = 0
    closed: int = 0

    def evaluate(self, cand: Candidate) -> Evaluation:
        self.threads.add(threading.get_ident())
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.raise_on and self.raise_on in cand.source:
                raise ValueError("evaluator bug")
            time.sleep(self.sleep_s)
            return Evaluation(cand.id, cand.task, Verdict.OK, device="rec")
        finally:
            self.active -= 1

    def device(self) -> DeviceInfo:
        return DeviceInfo(name="rec", arch="sm_90")

    def close(self) -> None:
        self.closed += 1



def test_the_evaluator_is_built_once_off_the_callers_thread_and_only_when_needed():
    built: list[int] = []
    rec = Recorder()

    def factory() -> Recorder:
        built.append(threading.get_ident())
        time.sleep(0.5)  # a slow construction (CUDA context, ceilings) must not block the caller
        return rec

    start = time.monotonic()
    ex = LocalExecutor(factory, max_in_flight=3)
    assert built == []
    for cand in softmax_variants(3):
        ex.submit(cand)
    assert time.monotonic() - start < 0.3
    assert len(drain(ex, 3)) == 3
    ex.close()
    assert built != [threading.get_ident()] and len(built) == 1
    assert rec.threads == set(built) and rec.closed == 1


def test_evaluations_run_one_at_a_time_in_submission_order():
    rec = Recorder()
    ex = LocalExecutor(lambda: rec, max_in_flight=4)
    cands = softmax_variants(4)
    assert ex.free_slots() == 4
    for c in cands:
        ex.submit(c)
    assert ex.free_slots() == 0
    got = drain(ex, 4)
    ex.close()
    assert [e.candidate_id for e in got] == [c.id for c in cands]
    assert rec.max_active == 1
    assert all(e.worker == "local" for e in got)  # each evaluation names its worker


def test_a_factory_that_fails_is_reported_by_poll_and_submit():
    def factory() -> Recorder:
        raise RuntimeError("no CUDA device")

    ex = LocalExecutor(factory)
    ex.submit(softmax_variants(1)[0])
    with pytest.raises(EvaluatorUnavailable, match="no CUDA device"):
        drain(ex, 1)
    with pytest.raises(EvaluatorUnavailable):
        ex.submit(softmax_variants(2)[1])
    assert ex.free_slots() == 0
    ex.close()


def test_an_evaluator_that_raises_gives_a_crash_verdict_and_keeps_going():
    good, bad = softmax_variants(2)
    bad = replace(bad, source=bad.source + "\n// boom\n")
    ex = LocalExecutor(lambda: Recorder(raise_on="// boom"), max_in_flight=2)
    ex.submit(bad)
    ex.submit(good)
    got = {e.candidate_id: e for e in drain(ex, 2)}
    ex.close()
    assert got[bad.id].verdict == Verdict.CRASH and "ValueError: evaluator bug" in got[bad.id].message
    assert got[good.id].verdict == Verdict.OK


def test_devices_reports_the_evaluators_gpu():
    ex = LocalExecutor(Recorder)
    assert {k: v.name for k, v in ex.workers(60.0).devices.items()} == {"local": "rec"}
    ex.close()


def test_busy_fraction_is_high_when_the_caller_keeps_the_queue_full():
    ex = LocalExecutor(lambda: Recorder(sleep_s=0.02), max_in_flight=2)
    cands = iter(softmax_variants(30))
    done, submitted = 0, 0
    while done < 30:
        while ex.free_slots() and submitted < 30:
            ex.submit(next(cands))
            submitted += 1
        done += len(ex.poll(1.0))
    busy = ex.workers().busy_fraction
    ex.close()
    assert busy > 0.9, busy


def test_close_drops_queued_candidates_and_closes_the_evaluator_once():
    rec = Recorder(sleep_s=0.2)
    ex = LocalExecutor(lambda: rec, max_in_flight=3)
    for c in softmax_variants(3):
        ex.submit(c)
    time.sleep(0.1)
    start = time.monotonic()
    ex.close()
    ex.close()
    assert time.monotonic() - start < 0.5  # the one in progress finishes; the rest never start
    assert rec.closed == 1 and ex.free_slots() == 0
    with pytest.raises(RuntimeError):
        ex.submit(softmax_variants(1)[0])


def test_a_task_pinned_to_another_gpu_model_is_refused_and_one_pinned_to_this_gpu_runs():
    ex = LocalExecutor(Recorder)
    try:
        good, other = softmax_variants(1)[0], replace(softmax_variants(2)[1], task="other")
        ex.pin(good.task, "rec")
        ex.pin("other", "H100 80GB HBM3")
        ex.submit(good)
        with pytest.raises(EvaluatorUnavailable, match="pinned to GPU model 'H100 80GB HBM3'.*this GPU is 'rec'"):
            ex.submit(other)
        (done,) = drain(ex, 1)
        assert done.candidate_id == good.id and done.worker == "local" and ex.free_slots() == 1
        (stats,) = ex.workers().stats
        assert (stats.name, stats.device, stats.evaluations, stats.state) == ("local", "rec", 1, "ready")
        assert ex.workers().notices == ()
    finally:
        ex.close()
