"""What the report measures each task against: the comparator that matters leads, one that was not
timed says so and why (from what the lineage and run.json record), each roofline fraction names
its ceiling, rates and spread are shown, impossible worker shares are flagged."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

from fsr import cli, dtypes
from fsr.report import ceilings, comparators, costs, data, kernels, tables, text
from tests.support.lineage_rows import T0, frame, row, write_run
from tests.support.report_imported_run import write_imported_run


def report_md(run: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(["report", str(run), "--format", "md"]) == 0
    return capsys.readouterr().out


def summary_line(md: str, task: str) -> list[str]:
    """A task's cells in the Markdown summary, by column name."""
    lines = md.splitlines()
    head = next(line for line in lines if line.startswith("| task |"))
    cells = next(line for line in lines if line.startswith(f"| {task} |"))
    names = [c.strip() for c in head.strip("|").split("|")]
    return dict(zip(names, [c.strip() for c in cells.strip("|").split("|")], strict=True))


def test_the_fastest_comparator_timed_leads_and_is_named() -> None:
    rows = [row(median_us=10.0, library_us=20.0, torch_us=15.0, torch_compile_us=12.0),
            row(candidate_id="b", task="gelu", median_us=10.0, library_us=8.0, torch_us=15.0)]
    s = tables.task_summary(frame(rows)).set_index("task")
    assert (s.loc["softmax", "lead"], s.loc["softmax", "speedup_lead"]) == ("torch.compile", pytest.approx(1.2))
    assert (s.loc["gelu", "lead"], s.loc["gelu", "speedup_lead"]) == ("library", pytest.approx(0.8))


def test_an_imported_tasks_pytorch_not_timed_is_shown_and_said_why(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    md = report_md(write_imported_run(tmp_path / "r"), capsys)
    conv, gemm = summary_line(md, "kb_conv"), summary_line(md, "kb_matmul_bf16")
    head = next(line for line in md.splitlines() if line.startswith("| task |"))
    # the comparators that matter come before the plain baseline kernel
    assert head.index("vs fastest of library and PyTorch") < head.index("vs PyTorch eager") < head.index("vs baseline")
    assert conv["vs PyTorch eager"] == conv["vs torch.compile"] == conv["vs fastest of library and PyTorch"] == "not timed"
    assert conv["vs library"] == "" and conv["vs baseline (plain kernel)"] == ""  # an imported task has neither
    assert gemm["vs fastest of library and PyTorch"] == "1.18x (torch.compile)" and gemm["vs PyTorch eager"] == "1.32x"
    assert ("- PyTorch eager and torch.compile, for kb_conv: no comparator of the task came back: they are timed "
            "beside its first candidates, and the campaign ended first (stopped by wall time)") in md


def test_why_a_comparator_was_not_timed_follows_what_was_recorded() -> None:
    summary = pd.DataFrame([
        {"task": "a", "baseline_us": 5.0, "library_us": 2.0, "torch_us": 1.0, "torch_compile_us": None},
        {"task": "b", "baseline_us": None, "library_us": None, "torch_us": None, "torch_compile_us": None},
        {"task": "c", "baseline_us": 5.0, "library_us": None, "torch_us": 1.0, "torch_compile_us": 1.0},
        {"task": "d", "baseline_us": 5.0, "library_us": 2.0, "torch_us": None, "torch_compile_us": None},
        {"task": "e", "baseline_us": 5.0, "library_us": 2.0, "torch_us": 1.0, "torch_compile_us": 1.0}])
    why = comparators.not_timed(summary, {}).set_index(["task", "comparator"])["reason"]
    assert why["a", "torch.compile"].startswith("torch.compile failed on it")
    assert why["b", "PyTorch eager"].startswith("no comparator of the task came back")
    assert "still going" in why["b", "PyTorch eager"]  # run.json records no campaign's end
    assert ("b", "library") not in why  # an imported task has no library to time
    assert why["c", "library"].startswith("the task has no library function")
    assert why["d", "PyTorch eager"].startswith("PyTorch eager failed on it")
    assert why["d", "torch.compile"] == "it is timed once PyTorch eager is, which was not"
    assert "e" not in why.index.get_level_values("task")
    off = comparators.not_timed(summary, {"config": {"eval": {"torch_compile": "off"}}})
    assert set(off.loc[off["comparator"] == "torch.compile", "reason"]) == {comparators.OFF}


def test_torch_compile_switched_off_leaves_its_column_out_and_says_so(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    md = report_md(write_imported_run(tmp_path / "r", compile_off=True), capsys)
    assert "torch.compile, for every task: off in this run's config" in md
    head = next(line for line in md.splitlines() if line.startswith("| task |"))
    assert "vs torch.compile" not in head and "vs PyTorch eager" in head  # eager still matters, and is shown
    assert summary_line(md, "kb_matmul_bf16")["vs fastest of library and PyTorch"] == "1.32x (PyTorch eager)"


def test_the_not_timed_columns_are_kept_unless_switched_off() -> None:
    missing = pd.DataFrame([{"task": "a", "comparator": "torch.compile", "column": "speedup_torch_compile",
                             "reason": comparators.OFF},
                            {"task": "a", "comparator": "PyTorch eager", "column": "speedup_torch", "reason": "x"}])
    assert text.not_timed_columns(missing) == {"speedup_torch", "speedup_lead"}
    assert text.not_timed_columns(missing.iloc[:1]) == frozenset()


def test_each_roofline_fraction_names_the_ceiling_it_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_imported_run(tmp_path / "r")
    md = report_md(run, capsys)
    assert summary_line(md, "kb_matmul_bf16")["of roofline"] == "60.3% of bf16 tensor-core rate"
    assert summary_line(md, "kb_conv")["of roofline"] == "50.0% of copy bandwidth"
    # softmax is both the run's largest implied copy rate and its float32 tasks' largest implied
    # SGEMM rate: these figures cannot tell which bound it
    assert summary_line(md, "softmax")["of roofline"] == "75.7% of copy bandwidth or SGEMM rate"
    assert "copy/SGEMM" not in md
    # with the device's measured ceilings in run.json, each is settled from them
    doc = json.loads((run / "run.json").read_text())
    doc["devices"] = [{"name": "NVIDIA H200", "arch": "sm_90", "copy_gbps": 3900.0, "sgemm_tflops": 51.0,
                       "half_tflops": 700.0}]
    (run / "run.json").write_text(json.dumps(doc))
    md = report_md(run, capsys)
    assert summary_line(md, "softmax")["of roofline"] == "75.7% of copy bandwidth"
    assert summary_line(md, "kb_matmul_bf16")["of roofline"] == "60.3% of bf16 tensor-core rate"


def test_every_low_precision_dtype_has_a_ceiling_name() -> None:
    assert set(ceilings.ARITHMETIC) == set(dtypes.TENSOR_RATE)
    assert ceilings.ceiling_name("arithmetic", None) == ceilings.ceiling_name("arithmetic", "float32") == "SGEMM rate"


def test_rates_and_spread_of_the_best_kernel_are_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md = report_md(write_imported_run(tmp_path / "r"), capsys)
    conv, gemm = summary_line(md, "kb_conv"), summary_line(md, "kb_matmul_bf16")
    assert (conv["rate"], conv["p10-p90 us"]) == ("1,950 GB/s", "97.0-105.0")
    assert (gemm["rate"], gemm["p10-p90 us"]) == ("422 TFLOP/s", "66.0-71.4")
    assert summary_line(md, "softmax")["rate"] == "2,954 GB/s, 7.38 TFLOP/s"  # bound not settled: both
    assert "kb_conv: kb_conv-5 at 100.0 us (p10-p90 97.0-105.0 us), 1,950 GB/s, 45 registers, 24 bytes spilled" in md
    assert "kb_matmul_bf16: kb_matmul_bf16-5 at 68.0 us (p10-p90 66.0-71.4 us), 422 TFLOP/s, 45 registers, no spills" in md


def test_a_worker_share_over_the_whole_span_is_flagged_impossible() -> None:
    rows = [row(candidate_id="a", worker="gpu0", wall_s=1.0),
            row(candidate_id="b", worker="gpu1", wall_s=5.0,
                started_at=T0 + timedelta(seconds=1), finished_at=T0 + timedelta(seconds=2))]
    workers = costs.worker_occupancy(frame(rows)).set_index("worker")
    assert workers.loc["gpu0", "flag"] == ""  # 1 s of a 2 s span
    assert workers.loc["gpu1", "flag"] == "impossible: busy 250% of the run's span"


def test_the_workers_table_explains_its_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md = report_md(write_imported_run(tmp_path / "r"), capsys)
    head = next(line for line in md.splitlines() if line.startswith("| worker |"))
    for column in [c.strip() for c in head.strip("|").split("|")][3:-1]:
        assert f"{column}:" in text.WORKERS_NOTE or column in ("evaluating", "preparing", "idle"), column
    assert "| gpu1 |" in md and "impossible: busy 600% of the run's span" in md


def test_what_paid_off_reads_an_imported_task_against_pytorch_eager() -> None:
    rows = [row(candidate_id=f"k{i}", task="kb", baseline_us=None, torch_us=None if i == 0 else 20.0,
                median_us=10.0 * (1 + i % 2), proposer="mutate", features_detected=["VEC4"] if i % 2 else [])
            for i in range(4)]
    effects = kernels.feature_effects(frame(rows)).set_index("feature")
    assert effects.loc["VEC4", "over"] == "PyTorch eager"
    assert effects.loc["VEC4", "speedup_with"] == pytest.approx(1.0)  # 20 us over 20 us
    assert effects.loc["VEC4", "speedup_without"] == pytest.approx(2.0)  # the first row takes the task's time
    builtin = kernels.feature_effects(frame([{**r, "baseline_us": 40.0} for r in rows])).set_index("feature")
    assert builtin.loc["VEC4", "over"] == "baseline" and builtin.loc["VEC4", "speedup_with"] == pytest.approx(2.0)


def test_the_page_names_the_ceiling_in_the_plots_and_loads_plotly_once(tmp_path: Path) -> None:
    run = write_imported_run(tmp_path / "r")
    t = data.run_tables(data.load_run(run))
    assert "roofline (bf16 tensor-core rate)" in t.references("kb_matmul_bf16")
    page = tmp_path / "page.html"
    assert cli.main(["report", str(run), "-o", str(page)]) == 0
    html = page.read_text()
    assert html.count("plotly.js (basic - minified)") == 1 and page.stat().st_size < 1.5e6
    assert "(label: how many)" in html  # what paid off: bars labelled with their counts



# ---- comparators timed after a campaign's last evaluation (run.json's `comparators`) ----------------

def test_figures_kept_in_run_json_fill_only_the_rows_without_them_on_the_same_gpu_model():
    rows = frame([row(candidate_id="a", torch_us=40.0, library_us=None),
                  row(candidate_id="b", torch_us=None, library_us=None),
                  row(candidate_id="c", task="sgemm", torch_us=None, library_us=None)])
    info = {"comparators": {"softmax": {"device": "NVIDIA H200", "torch_us": 99.0, "library_us": 20.0},
                            "sgemm": {"device": "NVIDIA B200", "library_us": 50.0}}}
    filled = comparators.with_recorded(rows, info)
    assert list(filled["torch_us"].fillna(-1)) == [40.0, 99.0, -1]  # the lineage's own figure stands
    assert list(filled["library_us"].fillna(-1)) == [20.0, 20.0, -1]  # another model's figure is not this one's
    assert rows["torch_us"].isna().sum() == 2  # the lineage's frame is untouched


def test_a_task_the_wait_left_without_comparators_says_why(tmp_path: Path):
    run = tmp_path / "run"
    write_run(run, [row(torch_us=None, library_us=None)],
              {"campaigns": [{"stopped_by": "wall time",
                              "comparators": {"left": {"softmax": "still being timed when the wait's bound ran out"}}}]})
    missing = data.run_tables(data.load_run(run)).missing
    assert set(missing["comparator"]) == {"library", "PyTorch eager", "torch.compile"}
    assert all("asked for after the campaign's last evaluation, where it was left: still being timed" in why
               for why in missing["reason"])


def test_a_run_json_comparator_reaches_the_report_summary(tmp_path: Path):
    run = write_run(tmp_path / "run", [row(torch_us=None, torch_compile_us=None)],
                    {"comparators": {"softmax": {"device": "NVIDIA H200", "torch_us": 30.0, "torch_compile_us": 20.0}}})
    summary = data.run_tables(data.load_run(run)).summary.set_index("task")
    assert (summary.loc["softmax", "torch_us"], summary.loc["softmax", "torch_compile_us"]) == (30.0, 20.0)
    assert summary.loc["softmax", "speedup_torch"] == pytest.approx(3.0)
