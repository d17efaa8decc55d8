"""GpuEvaluator.compare, its GPU child stood in for: comparators still being timed beside a
campaign's candidates are waited for; a task never prepared is prepared and asked; a task whose
comparators the evaluator holds is answered from them, not timed again; the bound is kept; a
failure of fsr's machinery leaves the figures out with why, never raising."""

from __future__ import annotations

import time
from typing import Any

from fsr import candidate as cfmt
from fsr import tasks
from fsr.config import Config, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.evaluate.wire import Compared, Faulted
from fsr.execute.base import BOUND_RAN_OUT
from fsr.types import WorkerSpec
from tests.support.stub_child import StubSandbox

SOFTMAX = tasks.load("softmax")
BASE = cfmt.parse(SOFTMAX.baseline_source, SOFTMAX)


class BesideChild(StubSandbox):
    """A stand-in child whose comparators, asked beside candidates, finish after `polls` more
    "ready" questions (None: never); `faulty` requests answer Faulted (fsr's own code failed)."""

    def __init__(self, polls: int | None, faulty: str = ""):
        super().__init__()
        self.polls, self.faulty = polls, faulty
        self.pending: list[str] = []

    def call(self, kind: str, payload: Any, timeout_s: float) -> Any:
        if kind == self.faulty:
            self.calls[kind] += 1
            return Faulted("fsr's own code failed in the GPU child")
        if kind == "prepare" and payload[1] == "beside":
            self.pending.append(payload[0])
        elif kind == "ready" and self.pending and self.polls is not None:
            self.polls -= 1
            if self.polls <= 0:  # sent before the reply, as the child does
                self.compared += [Compared(t, 20.0, 30.0, 25.0, 9.0, 0.01, ("library: none",)) for t in self.pending]
                self.pending = []
        return super().call(kind, payload, timeout_s)


def campaign_worker(compiler, sandbox: StubSandbox) -> GpuEvaluator:
    """A campaign's evaluator (comparators beside candidates) of softmax on `sandbox`."""
    evaluator = GpuEvaluator(WorkerSpec.of(Config(tune=TuneConfig(trials=0)), [SOFTMAX]), compiler=compiler,
                             beside=True, campaign=True)
    evaluator.sandbox = sandbox  # type: ignore[assignment]
    return evaluator


def test_comparators_still_being_timed_are_waited_for_and_answered(compiler) -> None:
    sandbox = BesideChild(polls=3)
    evaluator = campaign_worker(compiler, sandbox)
    try:
        first = evaluator.evaluate(BASE)
        assert first.torch_us is None and sandbox.pending == ["softmax"]  # still being timed
        prepared = sandbox.calls["prepare"]
        (answer,) = evaluator.compare(["softmax"], 5.0)
    finally:
        evaluator.close()
    assert (answer.library_us, answer.torch_us, answer.torch_compile_us, answer.torch_compile_s) == (20.0, 30.0, 25.0, 9.0)
    assert answer.fresh and not answer.left and answer.missed == ("library: none",) and answer.device == "stub H200"
    assert sandbox.calls["prepare"] == prepared  # asked of the child once, beside the first candidate


def test_a_task_whose_comparators_the_worker_holds_is_answered_without_timing_them_again(compiler) -> None:
    sandbox = BesideChild(polls=1)
    evaluator = campaign_worker(compiler, sandbox)
    try:
        evaluator.evaluate(BASE)
        assert evaluator.compare(["softmax"], 5.0)[0].fresh
        before = dict(sandbox.calls)
        (again,) = evaluator.compare(["softmax"], 5.0)
    finally:
        evaluator.close()
    assert dict(sandbox.calls) == before  # not a question to the child
    assert not again.fresh and again.torch_us == 30.0 and not again.left


def test_a_task_the_worker_never_prepared_is_prepared_asked_and_waited_for(compiler) -> None:
    sandbox = BesideChild(polls=2)
    evaluator = campaign_worker(compiler, sandbox)
    try:
        (answer,) = evaluator.compare(["softmax"], 5.0)
    finally:
        evaluator.close()
    assert [p for kind, p in sandbox.payloads if kind == "prepare"] == [("softmax", "beside")]
    assert answer.fresh and answer.torch_compile_us == 25.0 and not answer.left


def test_the_bound_is_kept_and_said(compiler) -> None:
    evaluator = campaign_worker(compiler, BesideChild(polls=None))
    try:
        evaluator.evaluate(BASE)
        started = time.perf_counter()
        (answer,) = evaluator.compare(["softmax"], 0.3)
        took = time.perf_counter() - started
    finally:
        evaluator.close()
    assert answer.left == BOUND_RAN_OUT and not answer.figures
    assert 0.3 <= took < 1.0


def test_a_machinery_fault_leaves_the_figures_out_with_why(compiler) -> None:
    evaluator = campaign_worker(compiler, BesideChild(polls=1, faulty="prepare"))
    try:
        (answer, unknown) = evaluator.compare(["softmax", "no_such_task"], 5.0)
    finally:
        evaluator.close()
    assert answer.left.startswith("fsr's own fault while timing them: task softmax: preparing its inputs failed")
    assert not answer.figures
    assert "no_such_task" in unknown.left and not unknown.figures
