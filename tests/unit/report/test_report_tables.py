"""Report tables computed on hand-built lineages with known answers."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fsr.report import tables
from tests.support.lineage_rows import T0, frame, row


def at(seconds: float) -> dict:
    return {"started_at": T0 + timedelta(seconds=seconds), "finished_at": T0 + timedelta(seconds=seconds + 1)}


def softmax_and_sgemm() -> list[dict]:
    return [
        row(candidate_id="a", median_us=10.0, **at(0)),
        row(candidate_id="b", median_us=8.0, ceiling_fraction=0.5, baseline_us=40.0, library_us=16.0,
            torch_us=12.0, worker="gpu1", **at(10)),
        row(candidate_id="c", verdict="WRONG", median_us=None, **at(20)),
        # faster than anything correct, but not OK: must never be the best
        row(candidate_id="d", verdict="SUSPECT", median_us=1.0, **at(30)),
        row(candidate_id="e", verdict="COMPILE_ERROR", median_us=None, **at(59)),
        row(candidate_id="f", task="sgemm", verdict="WRONG", median_us=None, device="NVIDIA H100", **at(0)),
    ]


def test_summary_takes_the_fastest_correct_kernel_and_its_references() -> None:
    s = tables.task_summary(frame(softmax_and_sgemm())).set_index("task")
    soft = s.loc["softmax"]
    assert soft["best_us"] == 8.0
    assert soft["ceiling_us"] == pytest.approx(4.0)
    assert soft["speedup_baseline"] == pytest.approx(5.0)
    assert soft["speedup_library"] == pytest.approx(2.0)
    assert soft["speedup_torch"] == pytest.approx(1.5)
    assert soft["device"] == "NVIDIA H200"


def test_summary_counts_every_verdict_of_a_task() -> None:
    soft = tables.task_summary(frame(softmax_and_sgemm())).set_index("task").loc["softmax"]
    assert soft["evaluations"] == 5
    assert (soft["OK"], soft["WRONG"], soft["SUSPECT"], soft["COMPILE_ERROR"], soft["CRASH"]) == (2, 1, 1, 1, 0)
    assert soft["verdicts"].startswith("OK 2")


def test_summary_of_a_task_with_no_correct_kernel_has_no_latencies() -> None:
    sgemm = tables.task_summary(frame(softmax_and_sgemm())).set_index("task").loc["sgemm"]
    assert sgemm["evaluations"] == 1
    assert sgemm["device"] == "NVIDIA H100"
    assert sgemm[["best_us", "speedup_baseline", "speedup_library", "speedup_torch"]].isna().all()


def test_summary_tolerates_a_lineage_without_torch_timings() -> None:
    old = frame(softmax_and_sgemm()).drop(columns=["torch_us"])
    soft = tables.task_summary(old).set_index("task").loc["softmax"]
    assert soft["best_us"] == 8.0
    assert soft["torch_us"] is None or soft["torch_us"] != soft["torch_us"]
    assert soft["speedup_torch"] is None or soft["speedup_torch"] != soft["speedup_torch"]


def test_tasks_share_the_runs_gpu_minutes_by_the_time_spent_evaluating_them() -> None:
    s = tables.task_summary(frame(softmax_and_sgemm())).set_index("task")
    # t=0 to t=60 s on two workers: two GPU-minutes; softmax took 5 of the 6 busy seconds
    assert s.loc["softmax", "evals_per_gpu_minute"] == pytest.approx(5 / (2 * 5 / 6))
    assert s.loc["sgemm", "evals_per_gpu_minute"] == pytest.approx(1 / (2 * 1 / 6))
    assert (s["evaluations"] / s["evals_per_gpu_minute"]).sum() == pytest.approx(2.0)


def test_a_missing_start_time_falls_back_to_finish_less_wall_time() -> None:
    rows = [row(candidate_id="a", started_at=None, finished_at=T0 + timedelta(seconds=30), wall_s=30.0),
            row(candidate_id="b", **at(29))]
    # a began at 0 s, so 2 evaluations in 30 s on one worker (120 per minute if a's start were lost)
    assert tables.task_summary(frame(rows))["evals_per_gpu_minute"].iat[0] == pytest.approx(4.0)


def five_results() -> list[dict]:
    return [
        row(candidate_id="a", island=0, median_us=10.0, **at(0)),
        row(candidate_id="b", island=0, median_us=12.0, **at(1)),
        row(candidate_id="c", island=1, median_us=8.0, **at(2)),
        row(candidate_id="d", island=0, verdict="SUSPECT", median_us=1.0, **at(3)),
        row(candidate_id="e", island=0, median_us=7.0, **at(4)),
    ]


def curve(curves, series: str) -> list[tuple[int, float]]:
    mine = curves[curves["series"] == series]
    return list(zip(mine["evaluation"].astype(int), mine["best_us"], strict=True))


def test_best_so_far_steps_where_the_best_improved_and_ends_at_the_last_evaluation() -> None:
    curves = tables.best_so_far(frame(five_results()))
    assert curve(curves, "all islands") == [(1, 10.0), (3, 8.0), (5, 7.0)]
    assert curve(curves, "island 0") == [(1, 10.0), (5, 7.0)]
    # island 1 never improved again: its line is carried to the task's last evaluation
    assert curve(curves, "island 1") == [(3, 8.0), (5, 8.0)]


def test_best_so_far_orders_by_when_results_came_back_not_by_row_order() -> None:
    rows = five_results()
    rows[0], rows[2] = rows[2], rows[0]
    assert curve(tables.best_so_far(frame(rows)), "all islands") == [(1, 10.0), (3, 8.0), (5, 7.0)]
    rows[2]["finished_at"] = T0 + timedelta(seconds=10)  # a's result now arrives last
    assert curve(tables.best_so_far(frame(rows)), "all islands") == [(1, 12.0), (2, 8.0), (4, 7.0), (5, 7.0)]


def test_best_so_far_time_axis_counts_from_the_runs_first_start() -> None:
    curves = tables.best_so_far(frame(five_results()))
    mine = curves[curves["series"] == "all islands"]
    assert mine["elapsed_s"].tolist() == pytest.approx([1.0, 3.0, 5.0])


def test_verdict_mix_cuts_each_tasks_results_into_equal_stretches() -> None:
    mix = tables.verdict_mix(frame(five_results()), bins=2)
    got = {(r.first, r.last, r.verdict): r.count for r in mix.itertuples()}
    assert got == {(1, 3, "OK"): 3, (4, 5, "OK"): 1, (4, 5, "SUSPECT"): 1}


def test_ceiling_latency_comes_from_recorded_fractions_of_correct_timed_rows() -> None:
    rows = [row(candidate_id="a", median_us=100.0, ceiling_fraction=0.4),
            row(candidate_id="b", median_us=50.0, ceiling_fraction=0.8),
            row(candidate_id="c", verdict="SUSPECT", median_us=10.0, ceiling_fraction=9.0)]
    assert tables.ceiling_us(frame(rows))["softmax"] == pytest.approx(40.0)
