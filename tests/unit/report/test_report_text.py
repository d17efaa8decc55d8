"""The report's tables as text and their shaping: one number format per column, the stage table
in pipeline order, geometric means, the device said once, tuning bars, runs compared by task."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fsr.report import costs, data, kernels, tables, text
from fsr.report.page import html_page
from tests.support.lineage_rows import frame, row, small_run, synthetic_rows


def test_a_column_of_numbers_has_one_format() -> None:
    cells = text.column_cells("per_evaluation_s", pd.Series([8.1e-05, 0.0354, 0.0]))
    assert cells == ["0.0001", "0.0354", "0.0000"]
    assert text.column_cells("best_us", pd.Series([6384.4, 169.0, None])) == ["6,384.4", "169.0", ""]
    assert text.column_cells("evaluations", pd.Series([40, 7], dtype=object)) == ["40", "7"]
    assert text.column_cells("ceiling_fraction", pd.Series([1.022])) == ["102.2%"]


def test_the_stage_table_is_in_pipeline_order() -> None:
    stages = costs.stage_times(frame([row(setup_s=0.5), row(candidate_id="b")]))
    assert list(costs.stage_table(stages).columns) == ["task", "setup", "compile", "verify", "tune", "time", "other"]
    md = text.markdown_table(costs.stage_table(stages))
    assert md.splitlines()[0] == "| task | setup | compile | verify | tune | time | other |"


def test_geometric_means_cover_the_tasks_where_each_comparator_was_measured() -> None:
    summary = pd.DataFrame({"task": ["a", "b"], "speedup_baseline": [2.0, 8.0], "speedup_library": [4.0, None],
                            "speedup_torch": [None, None]})
    means = tables.speedup_geomeans(summary).set_index("column")
    assert means.loc["speedup_baseline", "geomean"] == pytest.approx(4.0)
    assert (means.loc["speedup_library", "geomean"], means.loc["speedup_library", "tasks"]) == (4.0, 1)
    assert pd.isna(means.loc["speedup_torch", "geomean"]) and means.loc["speedup_torch", "tasks"] == 0
    shown, note = text.with_geomean(summary)
    assert shown.iloc[-1]["task"] == "geometric mean" and "library 1" in note and "of 2" in note


def test_fast_p_is_over_every_task_of_the_run() -> None:
    summary = pd.DataFrame({"task": ["a", "b", "c"], "best_us": [10.0, 20.0, None],
                            "speedup_baseline": [3.0, 0.9, None], "speedup_library": [None, None, None],
                            "speedup_torch": [1.5, None, None]})
    scores = tables.fast_p(summary).set_index("column")
    assert scores.loc["speedup_torch", ["fast_0_tasks", "fast_1_tasks", "fast_2_tasks"]].tolist() == [2, 1, 0]
    assert scores.loc["speedup_baseline", "fast_1"] == pytest.approx(1 / 3)  # b is correct but slower
    note = text.fast_p_note(summary)
    assert "vs PyTorch eager (measured for 1): fast_0 2/3 (67%), fast_1 1/3 (33%), fast_2 0/3 (0%)" in note
    assert "vs library" not in note  # never measured: left out


def test_the_device_column_shows_only_when_tasks_ran_on_several_models() -> None:
    one = tables.task_summary(frame([row(), row(candidate_id="b", task="sgemm")]))
    two = tables.task_summary(frame([row(), row(candidate_id="b", task="sgemm", device="NVIDIA H100")]))
    assert "device" not in text.summary_columns(one) and "device" in text.summary_columns(two)


def test_the_dtype_column_shows_where_the_lineage_records_it() -> None:
    old = tables.task_summary(frame([row(), row(candidate_id="b", task="sgemm")]))  # before the column
    new = tables.task_summary(frame([row(dtype="float32"), row(candidate_id="b", task="softmax_bf16", dtype="bfloat16")]))
    assert "dtype" not in text.summary_columns(old)
    assert "dtype" in text.summary_columns(new)
    assert dict(zip(new["task"], new["dtype"], strict=True)) == {"softmax": "float32", "softmax_bf16": "bfloat16"}
    assert "| softmax_bf16 | bfloat16 |" in text.markdown_table(new, text.summary_columns(new))


def test_tuning_bars_are_percent_above_the_best_and_mark_all_infeasible_values() -> None:
    spread = pd.DataFrame({"task": ["t"] * 3, "tunable": ["BLOCK"] * 3, "value": [128, 256, 1024],
                           "trials": [4, 4, 3], "infeasible": [0, 1, 3], "median_ratio": [1.0, 1.1, None],
                           "chosen": [2, 0, 0]})
    bars = kernels.tuning_bars(spread, "t")
    assert bars["label"].tolist() == ["BLOCK=128", "BLOCK=256", "BLOCK=1024"]
    assert bars["slower_pct"].iloc[:2].tolist() == pytest.approx([0.0, 10.0])
    assert bars["infeasible"].tolist() == [False, False, True] and pd.isna(bars["slower_pct"].iloc[2])


def test_runs_are_compared_by_task_with_each_runs_best_over_the_first_runs(tmp_path: Path) -> None:
    from tests.support.lineage_rows import write_run

    a = data.run_tables(data.load_run(small_run(tmp_path / "a")))
    only_b = [row(candidate_id=f"x{i}", task="scan", median_us=30.0 - i) for i in range(3)]
    b_rows = [row(candidate_id="s", task="softmax", median_us=25.0), *only_b]
    b = data.run_tables(data.load_run(write_run(tmp_path / "b", b_rows)))
    summary, curves = data.comparison([a, b])
    assert summary["task"].tolist() == ["scan", "sgemm", "softmax", "softmax"]  # by task, runs in order
    soft = summary[summary["task"] == "softmax"].set_index("run")["vs_first_run"]
    assert soft.tolist() == pytest.approx([1.0, 0.5])  # 25 us against 50 us
    assert summary.set_index("task").loc["scan", "vs_first_run"] != summary.set_index("task").loc["scan", "vs_first_run"]
    assert data.tasks_in_one_run(curves) == ["scan", "sgemm"]


def test_a_large_lineages_tables_format_without_mixed_notation() -> None:
    rows = synthetic_rows(300)
    stages = costs.stage_table(costs.stage_times(frame(rows)))
    md = text.markdown_table(stages)
    assert "e-0" not in md and "e+0" not in md


def test_a_comparator_no_task_measured_is_left_out_of_the_table() -> None:
    imported = pd.DataFrame({"task": ["a", "b"], "device": ["H100", "H100"], "speedup_baseline": [None, None],
                             "speedup_library": [None, None], "speedup_torch": [1.5, None],
                             "speedup_torch_compile": [None, None], "torch_compile_s": [None, None]})
    shown = text.summary_columns(imported)
    assert "speedup_torch" in shown
    assert not {"speedup_baseline", "speedup_library", "speedup_torch_compile", "torch_compile_s"} & set(shown)
    builtin = imported.assign(speedup_baseline=[2.0, None], speedup_torch_compile=[None, 1.1])
    assert {"speedup_baseline", "speedup_torch_compile"} <= set(text.summary_columns(builtin))


def test_where_the_campaign_certified_the_winner_is_the_fastest_certified_kernel(tmp_path: Path) -> None:
    from tests.support.lineage_rows import write_run

    rows = [row(candidate_id="seed", median_us=40.0),
            row(candidate_id="honest", parents=["seed"], median_us=20.0),
            row(candidate_id="cheat", parents=["honest"], median_us=5.0),
            row(candidate_id="c1", tier="certify", certified=True, certifies="honest", median_us=20.5),
            row(candidate_id="c2", tier="certify", certified=False, certifies="cheat", verdict="UNCERTIFIED",
                median_us=None, failed_check="fresh inputs at rows=7")]
    for mode, winner in (("end", "honest"), ("off", "cheat")):
        run = data.run_tables(data.load_run(write_run(tmp_path / mode, rows, {"config": {"eval": {"certify": mode}}})))
        summary = run.summary.set_index("task")
        assert summary.loc["softmax", "best_us"] == (20.0 if winner == "honest" else 5.0)
        assert summary.loc["softmax", "evaluations"] == 3  # certifications are not evaluations
        assert list(run.chains["softmax"]["candidate_id"]) == ["seed", "honest", "cheat"][:2 + (winner == "cheat")]


def test_the_report_says_per_task_how_many_certifications_failed_and_where(tmp_path: Path) -> None:
    from tests.support.lineage_rows import write_run

    rows = [row(candidate_id="seed", median_us=40.0),
            row(candidate_id="honest", parents=["seed"], median_us=20.0),
            row(candidate_id="cheat", parents=["honest"], median_us=5.0),
            row(candidate_id="fast", parents=["honest"], median_us=6.0),
            row(candidate_id="c1", tier="certify", certified=True, certifies="honest", median_us=20.5),
            row(candidate_id="c2", tier="certify", certified=False, certifies="cheat", verdict="UNCERTIFIED",
                median_us=None, failed_check="stress set logits x64 at rows=129,cols=4099"),
            row(candidate_id="c3", tier="certify", certified=False, certifies="fast", verdict="UNCERTIFIED",
                median_us=None, failed_check="timing")]
    run = data.run_tables(data.load_run(write_run(tmp_path / "r", rows, {"config": {"eval": {"certify": "end"}}})))
    [line] = run.certifications.to_dict("records")
    assert line == {"task": "softmax", "certifications": 3, "passed": 1, "failed": 2,
                    "failed_at": "stress set logits x64 at rows=129,cols=4099 (1); timing (1)",
                    "best_certified": "20.5 us (+2.5%)"}  # honest, screened at 20.0 us
    md = text.markdown([run])
    assert "Certification: 3 certifications, 2 failed; 1 of 1 tasks have a certified result." in md
    assert "| stress set logits x64 at rows=129,cols=4099 (1); timing (1) |" in md
    page = html_page([run])
    assert "failed at (how many)" in page and "timing (1)" in page
    assert json.loads(text.json_text([run]))["runs"][0]["certifications"][0]["failed"] == 2
    plain = data.run_tables(data.load_run(write_run(tmp_path / "plain", rows[:4], {})))
    assert plain.certifications.empty and "Certification:" not in text.markdown([plain])
    # with its control (the same load on the screening's own sets right after): that ratio too
    rows[4] = {**rows[4], "control_us": 20.4}
    paired = data.run_tables(data.load_run(write_run(tmp_path / "paired", rows, {"config": {"eval": {"certify": "end"}}})))
    assert paired.certifications.loc[0, "best_certified"] == "20.5 us (+2.5%; screening sets +0.5%)"


def test_the_report_counts_per_task_the_screenings_cut_short_and_answered_from_earlier(tmp_path: Path) -> None:
    from fsr.report.certifications import SCREENING_NOTE
    from tests.support.lineage_rows import write_run

    rows = [row(candidate_id="seed", median_us=40.0),
            row(candidate_id="a", median_us=60.0, cut_short=True), row(candidate_id="b", median_us=70.0, cut_short=True),
            row(candidate_id="b2", median_us=70.0, answered_from="b", cut_short=None),
            row(candidate_id="g", task="sgemm"),
            row(candidate_id="c1", tier="certify", certified=True, certifies="seed", cut_short=True)]  # not a screening
    run = data.run_tables(data.load_run(write_run(tmp_path / "r", rows, {"config": {"eval": {"certify": "end"}}})))
    summary = run.summary.set_index("task")
    assert summary.loc["softmax", ["cut_short", "answered_from", "screening"]].tolist() == \
        [2, 1, "2 cut short, 1 answered from an earlier judgement"]
    assert summary.loc["sgemm", ["cut_short", "answered_from", "screening"]].tolist() == [0, 0, ""]
    md = text.markdown([run])
    assert "| verdicts | screening |" in md and "| 2 cut short, 1 answered from an earlier judgement |" in md
    assert SCREENING_NOTE in md and "0 cut short" not in md
    page = html_page([run])
    assert "2 cut short, 1 answered from an earlier judgement" in page and "answered from an earlier judgement of" in page
    assert json.loads(text.json_text([run]))["runs"][0]["summary"][1]["cut_short"] == 2
    # certification time is a share of the workers' own
    head = next(line for line in md.splitlines() if line.startswith("| worker |"))
    assert "| evaluating | certifying | preparing |" in head and "certifying" in page


def test_a_run_without_shortcuts_or_certifications_shows_neither(tmp_path: Path) -> None:
    from fsr.report.certifications import SCREENING_NOTE, shortcut_counts

    run = data.run_tables(data.load_run(small_run(tmp_path / "plain")))
    md, page = text.markdown([run]), html_page([run])
    assert "| screening |" not in md and SCREENING_NOTE not in page and "cut short" not in md + page
    head = next(line for line in md.splitlines() if line.startswith("| worker |"))
    assert "certifying" not in head and "| evaluating | preparing |" in head
    old = frame([row(cut_short=True), row(candidate_id="b", answered_from="c0")])
    assert shortcut_counts(old).loc[0, "screening"] == "1 cut short, 1 answered from an earlier judgement"
    before = shortcut_counts(old.drop(columns=["tier", "cut_short", "answered_from"]))  # from before the columns
    assert before.to_dict("records") == [{"task": "softmax", "cut_short": 0, "answered_from": 0, "screening": ""}]


def test_a_lineage_from_before_the_tiers_is_reported(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fsr import lineage_schema

    tiers = ["tier", "certified", "certifies", "failed_check", "cut_short", "answered_from"]
    table = pa.Table.from_pylist([row(), row(candidate_id="b", median_us=5.0)], schema=lineage_schema.EVALUATIONS)
    (tmp_path / "old" / "evaluations").mkdir(parents=True)
    pq.write_table(table.drop_columns(tiers), tmp_path / "old" / "evaluations" / "part-0.parquet")
    run = data.run_tables(data.load_run(tmp_path / "old"))
    assert run.summary.loc[0, ["best_us", "cut_short", "answered_from", "screening"]].tolist() == [5.0, 0, 0, ""]
    assert run.workers.loc[0, "certifying"] == 0.0 and run.certifications.empty
    assert "| screening |" not in text.markdown([run])
