"""The paper's FSR loop: depth, budgets, correctness and performance reinforcement, the lineage;
and end to end, a model's failed attempts reaching its next prompts through a scripted server,
with compile errors from the real NVRTC stage."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fsr.candidate import parse, with_defines
from fsr.config import LLMConfig, SearchConfig
from fsr.lineage import LineageWriter, read
from fsr.propose.base import ProposalRequest, Proposals, ProposerTraits, answered_now
from fsr.propose.llm import LLMProposer
from fsr.search.fsr_strategy import run_fsr
from fsr.testing.fakes import FakeEvaluator, FakeExecutor, softmax_task
from fsr.testing.llm_server import (
    COMPILE_ERROR_KERNEL,
    COMPILE_ERROR_LINE,
    FAST_KERNEL,
    GOOD_KERNEL,
    WRONG_KERNEL,
    ScriptedServer,
    StandInEvaluator,
    fenced,
    reply,
)
from fsr.types import Candidate, Evaluation, Task, Verdict

TASK = softmax_task(None)
BASE = parse(TASK.baseline_source, TASK)


def variant(block: int, broken: bool = False) -> Candidate:
    cand = with_defines(BASE, {"BLOCK": block})
    if broken:
        from dataclasses import replace

        cand = replace(cand, source=cand.source + f"\n#error broken {block}\n")
    return cand


# Latency = 1000 us / factor: BLOCK=64 is 2x, 128 is 4x, 512 is 8x faster than the baseline.
EVALUATOR = dict(base_us=1000.0, noise=0.0, define_effects={("BLOCK", 64): 2.0, ("BLOCK", 128): 4.0,
                                                            ("BLOCK", 512): 8.0, ("BLOCK", 32): 1.5})


@dataclass
class ScriptedProposer:
    """Hands out prepared candidates, one list per round; records every request."""

    rounds: list[list[Candidate]]
    requests: list[ProposalRequest] = field(default_factory=list)
    name: str = "scripted"
    exhausted: bool = False
    raise_in_round: int = 0

    def propose(self, request: ProposalRequest) -> Proposals:
        self.requests.append(request)
        if len(self.requests) == self.raise_in_round:
            raise RuntimeError("proposer fault")
        cands = self.rounds.pop(0) if self.rounds else []
        return Proposals(tuple(cands[: request.n]), prompt_tokens=100, completion_tokens=40)

    def start(self, request: ProposalRequest) -> Future[Proposals]:
        return answered_now(self.propose, request)

    def describe(self, task: Task) -> ProposerTraits:
        return ProposerTraits(writes_first_kernel=True, features=(), exhausted_hint="")


@dataclass
class Rows:
    rows: list[tuple[Candidate, Evaluation, dict[str, Any]]] = field(default_factory=list)
    flushed: int = 0

    def append(self, candidate: Candidate, evaluation: Evaluation, **extra: Any) -> None:
        self.rows.append((candidate, evaluation, extra))

    def flush(self) -> None:
        self.flushed += 1


def run(proposer: Any, depth: int, n: int, max_evaluations: int = 100, writer: Rows | None = None) -> Any:
    executor = FakeExecutor(FakeEvaluator(**EVALUATOR), slots=2)  # type: ignore[arg-type]
    return run_fsr(TASK, executor, proposer, SearchConfig(max_evaluations=max_evaluations), writer, depth, n)


def test_it_stops_at_depth_and_keeps_the_fastest() -> None:
    proposer = ScriptedProposer([[variant(64), variant(32)], [variant(128), variant(96)], [variant(512), variant(48)],
                                 [variant(1024)]])
    summary = run(proposer, depth=3, n=2)
    assert len(summary.rounds) == 3 and len(proposer.requests) == 3 and summary.stopped_by == "depth"
    assert summary.evaluations == 1 + 3 * 2
    assert summary.best_candidate.id == variant(512).id and summary.best_evaluation.timing.median_us == 125.0
    assert [r.best_us for r in summary.rounds] == [500.0, 250.0, 125.0]
    assert (summary.prompt_tokens, summary.completion_tokens) == (300, 120)


def test_failures_are_fed_back_until_one_passes_then_the_fastest_is_improved() -> None:
    proposer = ScriptedProposer([[variant(64, broken=True), variant(128, broken=True)],
                                 [variant(64), variant(128)], [variant(512)]])
    summary = run(proposer, depth=3, n=2)
    first, second, third = proposer.requests
    assert first.best is not None and third.best is not None and third.contrast is not None
    assert first.parents[0].id == BASE.id and first.failures == () and first.best.id == BASE.id
    assert second.parents[0].id == BASE.id  # nothing passed: the parent stays
    assert {f.id for f in second.failures} == {variant(64, True).id, variant(128, True).id}
    assert all(f.evaluation is not None and f.evaluation.verdict == Verdict.COMPILE_ERROR for f in second.failures)
    assert third.parents[0].id == variant(128).id and third.best.id == variant(128).id  # the fastest
    assert third.contrast.id == variant(64).id  # beside the next-fastest, with its timing
    assert summary.best_candidate.id == variant(512).id
    assert [r.passed for r in summary.rounds] == [0, 2, 1]


def test_the_evaluation_budget_counts_the_baseline_and_trims_the_last_round() -> None:
    proposer = ScriptedProposer([[variant(64), variant(32)], [variant(128), variant(96)], [variant(512)]])
    summary = run(proposer, depth=10, n=2, max_evaluations=4)
    assert summary.evaluations == 4 and summary.stopped_by == "evaluations"
    assert [r.n for r in proposer.requests] == [2, 1]


def test_a_kernel_proposed_again_is_not_evaluated_again() -> None:
    proposer = ScriptedProposer([[variant(64)], [variant(64), variant(128)]])
    summary = run(proposer, depth=2, n=2)
    assert summary.evaluations == 3 and [r.evaluated for r in summary.rounds] == [1, 1]


def test_a_proposer_fault_spends_the_round_and_the_run_goes_on() -> None:
    proposer = ScriptedProposer([[variant(64)]], raise_in_round=1)
    summary = run(proposer, depth=2, n=1)
    assert "proposer fault" in summary.rounds[0].errors[0] and summary.rounds[1].passed == 1


def test_an_exhausted_proposer_ends_the_run() -> None:
    proposer = ScriptedProposer([[variant(64)]], exhausted=True)
    summary = run(proposer, depth=5, n=1)
    assert summary.stopped_by == "proposer budget" and summary.rounds == () and summary.evaluations == 1


def test_every_evaluation_is_written_with_the_tokens_on_each_calls_first_row() -> None:
    writer = Rows()
    run(ScriptedProposer([[variant(64), variant(128)]]), depth=1, n=2, writer=writer)
    assert [c.id for c, _, _ in writer.rows] == [BASE.id, variant(64).id, variant(128).id]
    assert [x["prompt_tokens"] for _, _, x in writer.rows] == [None, 100, None]
    assert all(x["features_detected"] is not None and x["finished_at"] for _, _, x in writer.rows)
    assert [c.generation for c, _, _ in writer.rows] == [0, 1, 1] and writer.flushed == 1


# ---- end to end with a model -------------------------------------------------------------------

@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedServer]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local server needs none
    with ScriptedServer() as s:
        yield s


def test_model_attempts_are_fed_back_and_the_fastest_correct_kernel_wins(server: ScriptedServer,
                                                                         tmp_path: Path) -> None:
    server.push(reply("Use shared memory, it is faster."), reply(fenced(COMPILE_ERROR_KERNEL)),
                reply(fenced(WRONG_KERNEL)), reply(fenced(GOOD_KERNEL)), reply(fenced(FAST_KERNEL)))
    evaluator = StandInEvaluator()
    proposer = LLMProposer(LLMConfig(model="scripted-model", base_url=server.base_url, timeout_s=5.0, retries=0,
                                     backoff_s=0.01), device=evaluator.device(), cache_dir=tmp_path / "run" / "llm_cache")
    with LineageWriter(tmp_path / "run") as writer:
        summary = run_fsr(TASK, FakeExecutor(evaluator, slots=2), proposer,  # type: ignore[arg-type]
                          SearchConfig(max_evaluations=50), writer, depth=5, n_per_round=1)
    prompts = server.prompts()
    assert len(prompts) == 5
    assert "no code" in prompts[1] and "Use shared memory" in prompts[1]  # the unusable reply
    assert COMPILE_ERROR_LINE in prompts[2] and "Verdict COMPILE_ERROR" in prompts[2]  # NVRTC's own log
    assert "17000 of 17000 elements wrong" in prompts[3] and COMPILE_ERROR_LINE in prompts[3]  # history kept
    assert "Verdict OK" in prompts[4] and "200 us" in prompts[4] and GOOD_KERNEL.strip() in prompts[4]
    assert summary.best_candidate is not None and summary.best_candidate.launches[0].kernel == "softmax_fast"
    assert summary.stopped_by == "depth"
    assert dict(summary.verdicts) == {"OK": 3, "COMPILE_ERROR": 1, "WRONG": 1}
    rows = read(tmp_path / "run").to_pylist()
    assert len(rows) == 5 and {r["model"] for r in rows} == {"", "scripted-model"}
    assert all(r["prompt_tokens"] for r in rows if r["proposer"] == "llm")
