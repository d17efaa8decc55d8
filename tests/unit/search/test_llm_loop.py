"""The model proposer inside the island search loop: threaded proposals, tokens in the lineage,
failed evaluations reaching the next prompts, a spent budget ending the run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fsr.config import LLMConfig, SearchConfig
from fsr.lineage import LineageWriter, read
from fsr.propose.llm import LLMProposer
from fsr.search.loop import run_campaign
from fsr.search.pace import Ceilings
from fsr.testing.fakes import FakeExecutor, softmax_task
from fsr.testing.llm_server import (
    COMPILE_ERROR_KERNEL,
    COMPILE_ERROR_LINE,
    FAST_KERNEL,
    GOOD_KERNEL,
    ScriptedServer,
    StandInEvaluator,
    fenced,
    reply,
)
from fsr.types import Verdict


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedServer]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedServer() as s:
        yield s


def test_the_island_loop_runs_on_model_proposals(server: ScriptedServer, tmp_path: Path) -> None:
    server.push(reply(fenced(COMPILE_ERROR_KERNEL)), reply(fenced(GOOD_KERNEL)), reply(fenced(FAST_KERNEL)),
                *(reply(fenced(GOOD_KERNEL + f"// variant {i}\n")) for i in range(6)))
    evaluator = StandInEvaluator()
    proposer = LLMProposer(LLMConfig(model="scripted-model", base_url=server.base_url, retries=0, timeout_s=5.0,
                                     backoff_s=0.01), device=evaluator.device())
    with LineageWriter(tmp_path / "run") as writer:
        summary = run_campaign([softmax_task(None)], FakeExecutor(evaluator, slots=1),  # type: ignore[arg-type]
                               proposer, SearchConfig(islands=1, max_evaluations=6), writer, pace=Ceilings(max_in_flight=1))
    rows = read(tmp_path / "run").to_pylist()
    assert summary.evaluations == 6 and len(rows) == 6
    verdicts = {r["verdict"] for r in rows}
    assert str(Verdict.COMPILE_ERROR) in verdicts and str(Verdict.OK) in verdicts
    llm_rows = [r for r in rows if r["proposer"] == "llm"]
    assert llm_rows and all(r["model"] == "scripted-model" and r["prompt_tokens"] for r in llm_rows)
    failed_at = next(i for i, r in enumerate(rows) if r["verdict"] == str(Verdict.COMPILE_ERROR))
    later = [p for p in server.prompts()[1:] if COMPILE_ERROR_LINE in p]
    assert failed_at >= 0 and later, "the compile error never reached a later prompt"
    assert len(server.bodies) <= 9  # bounded: the loop stops asking once the budget is committed
