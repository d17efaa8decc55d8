"""What the report says beside its tables: whether a run ended, which searches stopped short and
why, where each winner is and what tuning chose; fast_p counted as the speedups are shown, no
line for a comparator never measured, no feature credited for what only the seed lacks, the
comparison without empty columns, readable times, and plots whose titles clear the toolbar."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

from fsr import cli
from fsr.report import kernels, plots, tables, text
from fsr.report.page import STYLE
from tests.support.lineage_rows import T0, frame, row, small_run, write_run


def report_md(capsys: pytest.CaptureFixture[str], *runs: Path) -> str:
    assert cli.main(["report", *map(str, runs), "--format", "md"]) == 0
    return capsys.readouterr().out


def test_a_finished_run_says_it_ended(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = small_run(tmp_path / "r")
    assert "No campaign of this run recorded its end" in report_md(capsys, run)
    (run / "best").mkdir()  # fsr run exports the winners when its campaign ends
    assert "The campaign ended (best/ holds its kernels)" in report_md(capsys, run)
    doc = json.loads((run / "run.json").read_text())
    doc["campaigns"] = [{"evaluations": 13, "wall_s": 5.0, "driver_ms_per_evaluation": 1.0, "stopped_by": "evaluations"}]
    (run / "run.json").write_text(json.dumps(doc))
    assert cli.main(["report", str(run), "-o", str(tmp_path / "p.html")]) == 0
    page = (tmp_path / "p.html").read_text()
    assert "The campaign ended; the last was stopped by evaluations." in page and "has ended yet" not in page


def stalled_run(run_dir: Path, note: str = "") -> Path:
    """softmax: its seed and three slower kernels, 4 of a 10-evaluation budget."""
    rows = [row(candidate_id="seed", proposer="seed", median_us=40.0)]
    rows += [row(candidate_id=f"c{i}", parents=["seed"], median_us=40.0 / 0.99979 + i, move="mutate",
                 finished_at=T0 + timedelta(seconds=2 + i)) for i in range(3)]
    campaign = {"evaluations": 4, "wall_s": 1.0, "stopped_by": "exhausted",
                "tasks": {"softmax": {"evaluations": 4, "note": note}}}
    return write_run(run_dir, rows, {"config": {"search": {"max_evaluations": 10}}, "campaigns": [campaign]})


def test_a_stalled_search_says_it_stopped_and_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md = report_md(capsys, stalled_run(tmp_path / "a"))
    assert "softmax: the search stopped after 4 of 10 evaluations, stopped by exhausted; its best is the kernel " \
           "the search started from: no proposed kernel beat it." in md
    md = report_md(capsys, stalled_run(tmp_path / "b", note="softmax: nothing new to try after 4 evaluations"))
    assert "softmax: the search stopped early: softmax: nothing new to try after 4 evaluations;" in md
    full = small_run(tmp_path / "c")  # 6 and 7 evaluations, each best five steps from its seed
    doc = json.loads((full / "run.json").read_text())
    (full / "run.json").write_text(json.dumps({**doc, "config": {"search": {"max_evaluations": 6}}}))
    assert "Searches that stopped short" not in report_md(capsys, full)


def test_the_winner_its_tuned_values_and_its_file_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [row(candidate_id="slow", median_us=30.0),
            row(candidate_id="fast", median_us=10.0, defines=[{"name": "BLOCK", "value": 128}],
                tuned_defines=[{"name": "BLOCK", "value": 256}, {"name": "VEC", "value": 4}])]
    run = write_run(tmp_path / "r", rows)
    md = report_md(capsys, run)
    assert ("softmax: fast at 10.0 us, 32 registers, no spills, BLOCK=256, VEC=4; not exported (best/ is written "
            "when the run ends)") in md
    (run / "best").mkdir()
    (run / "best" / "softmax.cu").write_text("/* fsr */")
    assert (f"softmax: fast at 10.0 us, 32 registers, no spills, BLOCK=256, VEC=4; {run / 'best' / 'softmax.cu'}"
            in report_md(capsys, run))


def test_times_are_readable(tmp_path: Path) -> None:
    run = small_run(tmp_path / "r")
    doc = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**doc, "created_at": "2026-11-25T14:03:07.123456+00:00"}))
    assert cli.main(["report", str(run), "-o", str(tmp_path / "p.html")]) == 0
    page = (tmp_path / "p.html").read_text()
    assert "started 2026-11-25 14:03 UTC;" in page and ".123456" not in page


def test_fast_p_counts_a_speedup_as_the_report_shows_it() -> None:
    summary = pd.DataFrame({"best_us": [1.0, 1.0, 1.0], "speedup_baseline": [0.99979, 1.004, 1.006]})
    scores = tables.fast_p(summary).set_index("column")
    assert scores.loc["speedup_baseline", "fast_1_tasks"] == 1  # 1.00x, 1.00x and 1.01x as shown


def test_no_fast_p_line_for_a_comparator_no_task_measured() -> None:
    summary = pd.DataFrame({"best_us": [1.0, 2.0], "speedup_baseline": [2.0, 1.5], "speedup_torch": [None, None]})
    note = text.fast_p_note(summary)
    assert "vs baseline (measured for 2)" in note and "PyTorch eager" not in note


def test_no_feature_is_credited_for_what_only_the_seed_lacks() -> None:
    rows = [row(candidate_id="seed", proposer="seed", median_us=40.0)]
    rows += [row(candidate_id=f"c{i}", features_detected=["vec4"] + (["unroll"] if i % 2 else []),
                 median_us=2.0 if i % 2 else 4.0) for i in range(4)]
    effects = kernels.feature_effects(frame(rows)).set_index("feature")
    assert "vec4" not in effects.index  # every proposed kernel has it: only the seed lacks it
    assert effects.loc["unroll", "effect"] == pytest.approx(2.0)  # 20x with it, 10x without, the seed left out
    figure = plots.feature_figure(effects.reset_index(), "softmax")
    assert figure.layout.yaxis.type != "log" and figure.layout.yaxis.rangemode == "tozero"


def test_the_comparison_leaves_out_empty_columns_and_an_empty_contents_entry(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", [row(task="softmax", torch_us=None)])
    b = write_run(tmp_path / "b", [row(task="sgemm", torch_us=None)])
    assert cli.main(["report", str(a), str(b), "-o", str(tmp_path / "c.html")]) == 0
    page = (tmp_path / "c.html").read_text()
    compared = page[page.index("id='compare'"):page.index("best / first run's: the run's")]
    assert "vs PyTorch eager" not in compared and "vs torch.compile" not in compared and "vs baseline" in compared
    assert "Runs compared</a></li>" in page and "Runs compared</a>: </li>" not in page


def test_plot_titles_clear_the_toolbar_and_the_top_link_has_its_own_gutter() -> None:
    curves = pd.DataFrame({"task": ["t"], "series": ["all islands"], "evaluation": [1], "elapsed_s": [1.0],
                           "best_us": [5.0]})
    figure = plots.best_so_far_figure(curves, "t", "evaluation", {"baseline": 10.0})
    top_px = (1 - figure.layout.title.y) * figure.layout.height
    assert figure.layout.title.yref == "container" and top_px >= plots.TOOLBAR_PX
    assert figure.layout.margin.t >= top_px + 20  # the title sits in the margin, above the plot
    assert "padding-right: 5em" in STYLE and "right: 1em" in STYLE
