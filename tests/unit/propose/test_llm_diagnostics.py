"""Diagnostics in a campaign with a scripted endpoint: computed from each compiled candidate,
recorded in the lineage, shown in the prompts the server received (and in the replay cache's
prompts), gone when `llm.diagnostics` is off; alternated by island for an ablation, which the
report lines up."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from fsr.config import LLMConfig, SearchConfig
from fsr.evaluate import diagnose
from fsr.lineage import LineageWriter, read, read_pandas
from fsr.propose.llm import LLMProposer, shows_diagnostics
from fsr.report.ablation import diagnostics_lines
from fsr.search.loop import run_campaign
from fsr.search.pace import Ceilings
from fsr.testing.fakes import FakeExecutor, softmax_task
from fsr.testing.llm_server import FAST_KERNEL, GOOD_KERNEL, ScriptedServer, StandInEvaluator, fenced, reply
from fsr.types import Candidate, Evaluation

TASK = softmax_task(None)


@dataclass
class DiagnosingEvaluator(StandInEvaluator):
    """The stand-in evaluator, with the worker's diagnostics of each compiled candidate."""

    def evaluate(self, cand: Candidate) -> Evaluation:
        ev = super().evaluate(cand)
        if ev.timing is None and ev.message:
            return ev
        program = self.compiler.compile(cand, "sm_90")
        return replace(ev, diagnostics=diagnose.of_evaluation(cand, program, ev, TASK, self.device(), self.compiler))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedServer]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    if diagnose.nvdisasm() is None:  # a listing of the kernels' shape stands in for nvdisasm's
        monkeypatch.setattr(diagnose, "disassemble", lambda cubin: _listing(cubin))
    with ScriptedServer() as s:
        yield s


def _listing(cubin: bytes) -> dict[str, list[str]]:
    names = ("softmax_baseline", "softmax_rows", "softmax_fast")
    return {n: ["LDG.E.128", "STG.E.128", "BAR.SYNC", "EXIT"] for n in names if n.encode() in cubin}


def campaign(server: ScriptedServer, run: Path, **llm: object) -> list[str]:
    server.push(*(reply(fenced(k + f"// variant {i}\n")) for i in range(4) for k in (GOOD_KERNEL, FAST_KERNEL)))
    evaluator = DiagnosingEvaluator()
    config = LLMConfig(model="scripted-model", base_url=server.base_url, retries=0, timeout_s=5.0,  # type: ignore[arg-type]
                       backoff_s=0.01, **llm)
    proposer = LLMProposer(config, device=evaluator.device(), cache_dir=run / "llm_cache")
    with LineageWriter(run) as writer:
        run_campaign([TASK], FakeExecutor(evaluator, slots=1), proposer,  # type: ignore[arg-type]
                     SearchConfig(islands=1, max_evaluations=5), writer, pace=Ceilings(max_in_flight=1))
    return server.prompts()


def test_the_diagnostics_reach_the_model_and_the_lineage_and_the_switch_turns_them_off(
        server: ScriptedServer, tmp_path: Path) -> None:
    prompts = campaign(server, tmp_path / "on")
    shown = [p for p in prompts if "Machine code (static counts):\n- softmax_" in p]
    assert shown and "global loads" in shown[-1] and "Most likely limit:" in shown[-1]
    cached = [p.read_text() for p in (tmp_path / "on" / "llm_cache").rglob("*") if p.is_file()]
    assert any("Most likely limit:" in text for text in cached)  # what a replay serves from
    rows = read(tmp_path / "on").to_pylist()
    assert rows and all("global loads" in r["diagnostics"] for r in rows if r["verdict"] == "OK")

    server.bodies.clear()
    off = campaign(server, tmp_path / "off", diagnostics=False)
    assert off and not any("Machine code" in p or "Most likely limit" in p for p in off)
    assert any("Median" in p for p in off)  # feedback still comes, without the diagnostics


def test_islands_alternate_when_asked_and_the_report_lines_them_up() -> None:
    on, alternating = LLMConfig(model="m"), LLMConfig(model="m", diagnostics_by_island=True)
    assert [shows_diagnostics(on, i) for i in range(3)] == [True, True, True]
    assert [shows_diagnostics(alternating, i) for i in range(3)] == [True, False, True]
    assert not shows_diagnostics(replace(alternating, diagnostics=False), 0)


def test_the_report_lines_up_islands_with_and_without(server: ScriptedServer, tmp_path: Path) -> None:
    campaign(server, tmp_path / "run")
    frame = read_pandas(tmp_path / "run")
    assert diagnostics_lines(frame, {"llm": {"diagnostics_by_island": False}}) == []
    frame.loc[frame.index[-1], "island"] = 1  # as if island 1 had made the last one
    lines = diagnostics_lines(frame, {"llm": {"diagnostics": True, "diagnostics_by_island": True}})
    assert lines[0].startswith("Diagnostics alternated by island")
    assert "softmax: best" in lines[1] and "on the islands shown diagnostics (0;" in lines[1]
    assert "on the others (1; 1 evaluations)" in lines[1]
