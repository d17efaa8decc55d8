"""Racing on the worker's side, its GPU child stood in for: a campaign's worker sends each
candidate with the fastest median it judged OK for the task (its timing races against it); a
result cut short says so in its row and is never the figure raced against; `fsr eval`'s evaluator
does not race."""

from __future__ import annotations

from fsr import candidate as cfmt
from fsr import tasks
from fsr.evaluate.wire import ChildResult, EvalRequest
from fsr.types import Verdict
from tests.support.stub_child import StubSandbox, stub_evaluator

SOFTMAX = tasks.load("softmax")
BASE = cfmt.parse(SOFTMAX.baseline_source, SOFTMAX)


def answers(kind: str, payload: EvalRequest) -> ChildResult:
    """The baseline at 1 ms; BLOCK=128 at 1.5 ms, cut short; the rest at 0.9 ms."""
    block = dict(payload.candidate.resolved_defines()).get("BLOCK")
    if payload.candidate.id == BASE.id:
        return ChildResult(Verdict.OK, samples_us=(1000.0,) * 5)
    if block == 128:
        return ChildResult(Verdict.OK, samples_us=(1500.0,) * 5, cut_short=True)
    return ChildResult(Verdict.OK, samples_us=(900.0,) * 5)


def races(evaluator, sandbox: StubSandbox) -> list[float | None]:
    results = [evaluator.evaluate(cfmt.with_defines(BASE, {"BLOCK": b})) for b in (128, 512, 1024)]
    assert [r.cut_short for r in results] == [True, False, False]
    return [p.race_us for kind, p in sandbox.payloads if kind == "evaluate" and p.candidate.id != BASE.id]


def test_a_campaigns_worker_races_each_candidate_against_the_best_it_judged(compiler) -> None:
    sandbox = StubSandbox(answers)
    evaluator = stub_evaluator(SOFTMAX, compiler, sandbox)
    try:
        # the baseline (timed in the task's preparation) sets the first figure; the cut-short
        # result never does; the 0.9 ms one does
        assert races(evaluator, sandbox) == [1000.0, 1000.0, 900.0]
    finally:
        evaluator.close()


def test_an_evaluator_outside_a_campaign_does_not_race(compiler) -> None:
    sandbox = StubSandbox(answers)
    evaluator = stub_evaluator(SOFTMAX, compiler, sandbox, campaign=False)
    try:
        assert races(evaluator, sandbox) == [None, None, None]
    finally:
        evaluator.close()
