"""LocalExecutor.compare: the evaluator answers on its worker thread, after the candidates queued
before; a worker past the bound, or whose machinery fails, leaves the tasks saying why, and the
executor evaluates on."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from fsr.execute import base
from fsr.execute.local import LocalExecutor
from fsr.testing.fakes import FakeEvaluator, softmax_variants
from fsr.types import Candidate, Comparison, Evaluation
from tests.support.executors import drain


class Asked(FakeEvaluator):
    """Records the thread and the order of its calls; `compare_s` is what its comparators take."""

    def __init__(self, compare_s: float = 0.0, fail: bool = False):
        super().__init__(torch_us=250.0, beside=True, sleep_s=0.05)
        self.compare_s, self.fail = compare_s, fail
        self.order: list[str] = []
        self.threads: set[int] = set()

    def evaluate(self, cand: Candidate) -> Evaluation:
        self.threads.add(threading.get_ident())
        self.order.append("evaluate")
        return super().evaluate(cand)

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        self.threads.add(threading.get_ident())
        self.order.append("compare")
        if self.fail:
            raise RuntimeError("the GPU child failed twice")
        time.sleep(self.compare_s)
        return super().compare(tasks, wait_s)


def test_the_answer_comes_from_the_worker_thread_after_the_candidates_before_it():
    evaluator = Asked()
    ex = LocalExecutor(lambda: evaluator, max_in_flight=2)
    try:
        for cand in softmax_variants(2):
            ex.submit(cand)
        (answer,) = ex.compare(["softmax"], 5.0)
        assert evaluator.order == ["evaluate", "evaluate", "compare"]
        assert len(evaluator.threads) == 1 and threading.get_ident() not in evaluator.threads
        assert (answer.task, answer.torch_us, answer.worker, answer.left) == ("softmax", 250.0, "local", "")
        assert len(drain(ex, 2)) == 2 and ex.workers().stats[0].evaluations == 2  # no evaluation counted
    finally:
        ex.close()


def test_a_worker_past_the_bound_leaves_the_tasks_within_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(base, "COMPARE_GRACE_S", 0.2)
    ex = LocalExecutor(lambda: Asked(compare_s=3.0))
    try:
        ex.submit(softmax_variants(1)[0])
        assert len(drain(ex, 1)) == 1
        started = time.monotonic()
        answers = ex.compare(["softmax", "layernorm"], 0.3)
        assert time.monotonic() - started < 1.5
        assert [c.task for c in answers] == ["softmax", "layernorm"]
        assert all("did not answer within the 0.3-s bound" in c.left and not c.figures for c in answers)
    finally:
        ex.close()


def test_a_machinery_fault_leaves_the_tasks_as_fsrs_fault_and_the_executor_evaluates_on():
    ex = LocalExecutor(lambda: Asked(fail=True))
    try:
        ex.submit(softmax_variants(1)[0])
        assert len(drain(ex, 1)) == 1
        (answer,) = ex.compare(["softmax"], 5.0)
        assert answer.left == "fsr's own fault while timing them: the GPU child failed twice"
        ex.submit(softmax_variants(2)[1])
        assert len(drain(ex, 1)) == 1 and ex.free_slots() == 1
    finally:
        ex.close()


def test_an_evaluator_that_cannot_be_built_leaves_the_tasks_with_why():
    def broken() -> FakeEvaluator:
        raise RuntimeError("no CUDA device visible")

    ex = LocalExecutor(broken)
    try:
        started = time.monotonic()
        (answer,) = ex.compare(["softmax"], 30.0)
        assert time.monotonic() - started < 5.0
        assert "no CUDA device visible" in answer.left and not answer.figures
    finally:
        ex.close()
