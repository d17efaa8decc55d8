"""The Executor contract, for fsr's own executors and a user's. A test module
(`from fsr.testing.executor_contract import ExecutorContract`) subclasses `ExecutorContract` and
provides `make_executor`; every test here then runs against it:

    class TestLocalExecutor(ExecutorContract):
        timeout_s = 300.0
        def make_executor(self):
            return LocalExecutor(config)

The candidates are variants of the softmax baseline (and one that cannot compile), so a real
executor needs a GPU; the in-process fake in fsr/testing/fakes.py runs the suite without one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from fsr import certification
from fsr.execute.base import Executor
from fsr.testing.fakes import broken, softmax_variants
from fsr.types import Evaluation, Tier, Verdict


class ExecutorContract:
    """Behaviour every Executor must have. `timeout_s` bounds one evaluation's round trip."""

    timeout_s: float = 120.0
    names_workers: bool = True  # its evaluations name the worker that gave them (a fake has none)

    def make_executor(self) -> Executor:
        raise NotImplementedError

    @pytest.fixture
    def executor(self) -> Iterator[Executor]:
        ex = self.make_executor()
        try:
            yield ex
        finally:
            ex.close()

    def collect(self, executor: Executor, count: int) -> list[Evaluation]:
        """Poll until `count` evaluations came back (or the timeout passed)."""
        out: list[Evaluation] = []
        deadline = time.monotonic() + self.timeout_s
        while len(out) < count and time.monotonic() < deadline:
            out += executor.poll(min(1.0, max(0.0, deadline - time.monotonic())))
        return out

    def test_each_evaluation_names_a_worker_the_executor_reports(self, executor):
        executor.submit(softmax_variants(1)[0])
        (got,) = self.collect(executor, 1)
        workers = executor.workers()
        names = {w.name for w in workers.stats}
        if self.names_workers:
            assert got.worker in names, (got.worker, names)
        else:
            assert got.worker == ""
        assert 0.0 <= workers.busy_fraction <= 1.0

    def test_an_idle_executor_has_free_slots(self, executor):
        assert executor.free_slots() >= 1

    def test_submitting_takes_a_slot_and_a_result_gives_it_back(self, executor):
        idle = executor.free_slots()
        executor.submit(softmax_variants(1)[0])
        assert executor.free_slots() == idle - 1
        assert len(self.collect(executor, 1)) == 1
        assert executor.free_slots() == idle

    def test_every_submitted_candidate_comes_back_exactly_once(self, executor):
        cands = softmax_variants(min(3, executor.free_slots()))
        for c in cands:
            executor.submit(c)
        got = self.collect(executor, len(cands))
        assert sorted(e.candidate_id for e in got) == sorted(c.id for c in cands)
        assert executor.poll(0.2) == []

    def test_evaluations_are_records_of_the_right_task(self, executor):
        cand = softmax_variants(1)[0]
        executor.submit(cand)
        (ev,) = self.collect(executor, 1)
        assert isinstance(ev, Evaluation) and isinstance(ev.verdict, Verdict)
        assert ev.task == cand.task and ev.candidate_id == cand.id
        if ev.verdict == Verdict.OK:
            assert ev.timing is not None and ev.timing.median_us > 0

    def test_a_broken_kernel_is_a_verdict_not_an_exception(self, executor):
        bad = broken()
        executor.submit(bad)
        (ev,) = self.collect(executor, 1)
        assert ev.candidate_id == bad.id and ev.verdict == Verdict.COMPILE_ERROR and ev.message

    def test_a_certification_request_comes_back_as_the_certification_it_names(self, executor):
        cand = softmax_variants(1)[0]
        executor.submit(cand)
        (screened,) = self.collect(executor, 1)
        assert screened.tier == Tier.SCREEN and screened.certified is None
        assert screened.verdict == Verdict.OK, screened.message
        request = certification.request(cand, screened)
        executor.submit(request)
        (got,) = self.collect(executor, 1)
        assert got.candidate_id == request.id != cand.id and got.task == cand.task
        assert got.tier == Tier.CERTIFY and got.verdict == Verdict.OK and got.certified is True, got.message
        assert got.timing is not None and got.timing.median_us > 0

    def test_poll_with_nothing_in_flight_returns_nothing_within_its_timeout(self, executor):
        start = time.monotonic()
        assert executor.poll(0.2) == []
        assert time.monotonic() - start < 5.0

    def test_comparators_asked_after_the_evaluations_come_back_one_per_task_and_are_no_evaluation(self, executor):
        first = softmax_variants(1)[0]
        executor.submit(first)
        assert len(self.collect(executor, 1)) == 1  # as after a campaign: its evaluations are done
        answers = executor.compare([first.task], 5.0)
        assert [c.task for c in answers] == [first.task]
        assert executor.poll(0.05) == []  # no evaluation came of it
        executor.submit(softmax_variants(2)[1])  # and the executor evaluates on
        assert len(self.collect(executor, 1)) == 1

    def test_close_twice_is_harmless(self, executor):
        executor.close()
        executor.close()
