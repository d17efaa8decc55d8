"""`fsr bench` and `fsr report` with comparators that no evaluation carried: the campaign asks for
them after its last evaluation, run.json keeps them, and the table and the report read them
beside the lineage's (the report's side alone: tests/unit/report/test_report_comparators.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from fsr import cli, lineage, run_json
from fsr.report.data import load_run, run_tables
from fsr.testing.fakes import FakeEvaluator, FakeExecutor
from fsr.types import Candidate, Comparison, Evaluation


class LateComparators(FakeEvaluator):
    """A campaign's worker whose comparators (the library; PyTorch eager and torch.compile for
    softmax) had not come back by the campaign's end."""

    def __init__(self) -> None:
        super().__init__(beside=True)

    def evaluate(self, cand: Candidate) -> Evaluation:
        return replace(super().evaluate(cand), library_us=None)

    def compare(self, tasks, wait_s) -> list[Comparison]:
        self.compares.append(tuple(tasks))
        return [Comparison(t, "fake", library_us=500.0, torch_us=250.0 if t == "softmax" else None,
                           torch_compile_us=200.0 if t == "softmax" else None, fresh=True) for t in tasks]


@pytest.fixture
def late(monkeypatch: pytest.MonkeyPatch) -> LateComparators:
    evaluator = LateComparators()
    monkeypatch.setattr("fsr.commands.run._executor", lambda *a: FakeExecutor(evaluator, slots=2))
    return evaluator


def bench(suite: Path, tmp_path: Path, *extra: str) -> Path:
    runs = tmp_path / "runs"
    assert cli.main(["--tasks-dir", str(suite), "bench", "--runs-dir", str(runs), "--max-evaluations", "3",
                     "--tune-trials", "0", "--plain", *extra]) == 0
    (run_dir,) = runs.iterdir()
    return run_dir


def test_the_bench_table_has_the_comparators_timed_after_the_last_evaluation(suite, tmp_path, late, capsys):
    run_dir = bench(suite, tmp_path)
    assert late.compares == [("layernorm", "softmax")]
    rows = lineage.read(run_dir).to_pylist()
    assert rows and all(r["torch_us"] is None and r["library_us"] is None for r in rows)  # not on any row
    doc = json.loads((run_dir / "bench.json").read_text())
    softmax = next(t for t in doc["tasks"] if t["task"] == "softmax")
    assert (softmax["library_us"], softmax["torch_us"], softmax["torch_compile_us"]) == (500.0, 250.0, 200.0)
    assert softmax["speedup_torch"] == pytest.approx(250.0 / softmax["best_us"])
    assert doc["geomean"]["torch"]["tasks"] == 1 and doc["geomean"]["library"]["tasks"] == 2
    recorded = run_json.read_run_json(run_dir)
    assert recorded["comparators"]["softmax"] == {"device": "fake", "worker": "", "library_us": 500.0,
                                                  "torch_us": 250.0, "torch_compile_us": 200.0}
    (campaign,) = recorded["campaigns"]
    assert campaign["comparators"]["timed"] == ["layernorm", "softmax"] and campaign["comparators"]["left"] == {}
    assert campaign["comparators"]["bound_s"] == 120.0
    assert "comparators of 2 tasks asked for after the last evaluation (at most 120 s): 2 came back" \
        in capsys.readouterr().err
    report = run_tables(load_run(run_dir))  # the report reads them as the table does
    assert report.summary.set_index("task").loc["softmax", "torch_compile_us"] == 200.0
    assert set(report.missing["task"]) == {"layernorm"}  # it has no PyTorch figure here, and softmax lacks none


def test_the_wait_is_a_knob_and_zero_asks_for_nothing(suite, tmp_path, late):
    run_dir = bench(suite, tmp_path, "--comparators-wait", "0")
    assert late.compares == []
    doc = json.loads((run_dir / "bench.json").read_text())
    assert all(t["torch_us"] is None for t in doc["tasks"])
    assert "comparators" not in run_json.read_run_json(run_dir)


def test_a_task_no_evaluation_reached_has_its_comparators_in_the_table() -> None:
    """A short campaign ends before some tasks get a candidate (KernelBench level 1 in 110 s
    reached 47 of 98): the comparators asked for afterwards have no lineage row to fill, and
    the table takes them from run.json."""
    from fsr.commands import bench as bench_command
    from fsr.report.comparators import recorded_figures

    info = {"comparators": {"never_ran": {"device": "H200", "torch_us": 40.0, "torch_compile_us": 30.0,
                                          "library_us": None, "torch_compile_s": 2.0}}}
    import pandas as pd

    (row,) = bench_command.bench_rows(pd.DataFrame(), ["never_ran"], recorded_figures(info))
    assert (row["torch_us"], row["torch_compile_us"], row["library_us"]) == (40.0, 30.0, None)
    assert row["evaluations"] == 0 and row["best_us"] is None
    (bare,) = bench_command.bench_rows(pd.DataFrame(), ["never_ran"])
    assert bare["torch_us"] is None  # without run.json's figures: what the table showed before
