"""A campaign that ends by itself asks for the comparators no evaluation carried, before its table:
once the evaluations in flight are done, within its bound, said in the summary; never after a
user's stop, and never for a task whose comparators an evaluation already carried."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fsr.config import SearchConfig
from fsr.execute.base import BOUND_RAN_OUT
from fsr.propose.mutate import MutateProposer
from fsr.search.comparators import ComparatorWait
from fsr.search.loop import run_campaign
from fsr.testing.fakes import FakeEvaluator, FakeExecutor, ListWriter, softmax_task
from fsr.types import Candidate, Comparison, Evaluation

SOFTMAX = softmax_task()
OTHER = replace(SOFTMAX, name="softmax_b")  # a second task: tasks are labels to the fake evaluator


def beside(**kw) -> FakeEvaluator:
    """A worker whose comparators were still being timed when its campaign ended."""
    return FakeEvaluator(torch_us=250.0, compile_us=200.0, beside=True, **kw)


def campaign(executor: FakeExecutor, tasks=(SOFTMAX,), **config) -> tuple:
    writer = ListWriter()
    search = SearchConfig(**{"max_evaluations": 6, "islands": 1, "seed": 1, **config})
    return run_campaign(list(tasks), executor, MutateProposer(), search, writer), writer


def test_a_budget_stopped_campaign_has_its_untimed_comparators_timed_before_the_table():
    executor = FakeExecutor(beside(), slots=4, eval_s=0.2, real_time=True)
    summary, writer = campaign(executor, max_wall_s=0.5, max_evaluations=1000)
    assert "wall time" in summary.stopped_by
    assert all(ev.torch_us is None for _, ev, _ in writer.rows)  # no evaluation carried them
    # asked once, for the task, with nothing in flight: the evaluations in flight finished first
    assert executor.compare_calls == [(("softmax",), 0)]
    wait = summary.comparators
    assert isinstance(wait, ComparatorWait) and wait.timed == ["softmax"] and not wait.left
    (answer,) = wait.answers
    assert (answer.torch_us, answer.torch_compile_us, answer.fresh) == (250.0, 200.0, True)
    assert "comparators of 1 task asked for after the last evaluation" in wait.text()
    assert wait.record()["timed"] == ["softmax"]


def test_an_evaluation_budget_stop_asks_too_and_no_comparison_is_an_evaluation():
    executor = FakeExecutor(beside(), slots=2)
    summary, writer = campaign(executor, max_evaluations=3)
    assert summary.comparators is not None and summary.comparators.timed == ["softmax"]
    assert summary.evaluations == len(writer.rows) == 3  # the question wrote no row and counted nothing


def test_the_bound_is_kept_and_the_tasks_past_it_are_left_saying_why():
    executor = FakeExecutor(beside(), slots=2, compare_s=10.0)  # each task's comparators take 10 s
    summary, _ = campaign(executor, tasks=(SOFTMAX, OTHER), max_evaluations=2, comparators_wait_s=15.0)
    wait = summary.comparators
    assert wait is not None and wait.bound_s == 15.0
    assert wait.timed == ["softmax"] and wait.left == {"softmax_b": BOUND_RAN_OUT}
    text = wait.text()
    assert "1 came back" in text and "at most 15 s" in text and f"softmax_b ({BOUND_RAN_OUT})" in text


def test_a_bound_of_zero_asks_for_nothing():
    executor = FakeExecutor(beside(), slots=2)
    summary, _ = campaign(executor, max_evaluations=2, comparators_wait_s=0.0)
    assert executor.compare_calls == [] and summary.comparators is None


class Interrupting:
    """A view whose user presses Ctrl-C after the first results."""

    def update(self, progress) -> None:
        if progress.evaluations:
            raise KeyboardInterrupt

    def close(self, progress) -> None:
        pass

    def note(self, text: str) -> None:
        pass


def test_a_user_stop_does_not_wait_for_comparators():
    executor = FakeExecutor(beside(), slots=2)
    with pytest.raises(KeyboardInterrupt):
        run_campaign([SOFTMAX], executor, MutateProposer(), SearchConfig(max_evaluations=50, islands=1),
                     ListWriter(), Interrupting())
    assert executor.compare_calls == []


class CarriesFor(FakeEvaluator):
    """Comparator figures on the evaluations of `carried` tasks only (the others' came too late)."""

    def __init__(self, carried: set[str]):
        super().__init__(torch_us=250.0, beside=True)
        self.carried = carried

    def evaluate(self, cand: Candidate) -> Evaluation:
        ev = super().evaluate(cand)
        return replace(ev, torch_us=self.torch_us) if cand.task in self.carried else ev


def test_a_task_whose_comparators_an_evaluation_carried_is_not_timed_again():
    executor = FakeExecutor(CarriesFor({"softmax"}), slots=2)
    summary, _ = campaign(executor, tasks=(SOFTMAX, OTHER), max_evaluations=3)
    assert executor.compare_calls == [(("softmax_b",), 0)]
    assert summary.comparators is not None and summary.comparators.timed == ["softmax_b"]
    everything = FakeExecutor(CarriesFor({"softmax", "softmax_b"}), slots=2)
    summary, _ = campaign(everything, tasks=(SOFTMAX, OTHER), max_evaluations=3)
    assert everything.compare_calls == [] and summary.comparators is None


class Failing(FakeExecutor):
    def compare(self, tasks, wait_s) -> list[Comparison]:
        raise RuntimeError("all 2 GPU workers failed repeatedly")


def test_a_machinery_fault_while_asking_is_said_and_the_rows_stand():
    executor = Failing(beside(), slots=2)
    summary, writer = campaign(executor, max_evaluations=3)
    assert len(writer.rows) == 3 and writer.flushes  # what was evaluated is written
    wait = summary.comparators
    assert wait is not None and wait.timed == []
    assert wait.left["softmax"].startswith("fsr's own fault: all 2 GPU workers failed")
