"""Stage times, worker occupancy and model cost on hand-built lineages."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fsr import run_json
from fsr.report import costs
from tests.support.lineage_rows import T0, frame, row


def timed(cid: str, worker: str, start_s: float, wall_s: float, **values) -> dict:
    return row(candidate_id=cid, worker=worker, wall_s=wall_s, started_at=T0 + timedelta(seconds=start_s),
               finished_at=T0 + timedelta(seconds=start_s + wall_s), **values)


def test_stage_times_add_up_to_wall_time_per_task() -> None:
    rows = [timed("a", "gpu0", 0, 2.0, setup_s=0.5, compile_s=0.2, verify_s=0.1, tune_s=0.6, bench_s=0.4),
            timed("b", "gpu0", 2, 1.0, setup_s=None, compile_s=0.1, verify_s=0.1, tune_s=0.3, bench_s=0.3)]
    stages = costs.stage_times(frame(rows)).set_index("stage")
    assert stages["total_s"].sum() == pytest.approx(3.0)
    assert stages.loc["setup", "total_s"] == pytest.approx(0.5)  # a lineage without setup_s counts none
    assert stages.loc["time", "per_evaluation_s"] == pytest.approx(0.35)
    assert stages.loc["other", "total_s"] == pytest.approx(0.4)


def test_occupancy_is_busy_time_over_the_runs_span_per_worker() -> None:
    rows = [timed("a", "gpu0", 0, 10.0), timed("b", "gpu0", 10, 10.0),
            timed("c", "gpu1", 5, 5.0)]  # gpu1 started late and stopped early
    workers = costs.worker_occupancy(frame(rows)).set_index("worker")
    assert workers.loc["gpu0", "occupancy"] == pytest.approx(1.0)
    assert workers.loc["gpu1", "occupancy"] == pytest.approx(0.25)
    assert (workers.loc["gpu1", "first_start_s"], workers.loc["gpu1", "idle_end_s"]) == (5.0, 10.0)


def test_a_workers_time_is_told_apart_evaluating_preparing_and_idle() -> None:
    # gpu0 prepares task a, then b, then a again (3 s each) over a 20 s span; gpu1 prepares once
    rows = [timed("a1", "gpu0", 0, 5.0, task="a", setup_s=3.0), timed("b1", "gpu0", 5, 5.0, task="b", setup_s=3.0),
            timed("a2", "gpu0", 10, 5.0, task="a", setup_s=3.0), timed("a3", "gpu0", 15, 5.0, task="a", setup_s=0.0),
            timed("c1", "gpu1", 0, 10.0, task="c", setup_s=1.0)]
    workers = costs.worker_occupancy(frame(rows)).set_index("worker")
    assert workers.loc["gpu0", ["evaluating", "preparing", "idle"]].tolist() == pytest.approx([11 / 20, 9 / 20, 0.0])
    assert workers.loc["gpu1", ["evaluating", "preparing", "idle"]].tolist() == pytest.approx([9 / 20, 1 / 20, 0.5])
    assert (workers.loc["gpu0", "preparations"], workers.loc["gpu1", "preparations"]) == (2, 1)


def test_token_cost_needs_both_prices() -> None:
    rows = [row(candidate_id="a", model="m", prompt_tokens=1_000_000, completion_tokens=500_000),
            row(candidate_id="b", model="m", prompt_tokens=1_000_000, completion_tokens=500_000),
            row(candidate_id="c")]  # the offline proposer: no tokens
    priced = costs.token_use(frame(rows), {"llm": {"input_price_per_mtok": 2.0, "output_price_per_mtok": 8.0}})
    assert priced.iloc[0]["proposals"] == 2
    assert priced.iloc[0]["cost_usd"] == pytest.approx(2 * (2.0 + 4.0))
    unpriced = costs.token_use(frame(rows), {"llm": {"input_price_per_mtok": 2.0, "output_price_per_mtok": -1.0}})
    assert unpriced["cost_usd"].isna().all()
    assert costs.token_use(frame(rows[2:]), {}).empty


def test_driver_time_has_a_row_per_campaign_of_the_run(tmp_path) -> None:

    run_json.write_run_json(tmp_path, {})
    assert costs.driver_time(run_json.read_run_json(tmp_path)).empty  # a run whose campaign has not ended
    run_json.record_campaign(tmp_path, {"evaluations": 40, "wall_s": 61.0, "driver_ms_per_evaluation": 3.4,
                                       "stopped_by": "evaluations"})
    run_json.record_campaign(tmp_path, {"evaluations": 8, "wall_s": 9.5, "driver_ms_per_evaluation": 5.0,
                                       "stopped_by": "wall"})  # a resume
    table = costs.driver_time(run_json.read_run_json(tmp_path))
    assert table["campaign"].tolist() == [1, 2]
    assert table["driver_ms_per_evaluation"].tolist() == [3.4, 5.0]
    assert table["stopped_by"].tolist() == ["evaluations", "wall"]
    assert costs.driver_time({"campaigns": ["damaged", None]}).empty


def test_comparators_timed_beside_candidates_are_preparing_but_no_preparation_of_the_task() -> None:
    """A campaign's worker charges the GPU seconds of comparators timed beside candidates to the
    next evaluation, of whatever task: they count as preparing, never as one more preparation
    of that evaluation's task."""
    rows = [timed("a1", "gpu0", 0, 5.0, task="a", setup_s=3.0, comparators_s=0.0),
            timed("a2", "gpu0", 5, 5.0, task="a", setup_s=0.5, comparators_s=0.5),  # b's comparators
            timed("a3", "gpu0", 10, 5.0, task="a", setup_s=1.4, comparators_s=0.4),  # paid 1 s itself
            timed("a4", "gpu0", 15, 5.0, task="a", setup_s=None, comparators_s=None)]  # an older lineage
    workers = costs.worker_occupancy(frame(rows)).set_index("worker")
    assert workers.loc["gpu0", "preparing"] == pytest.approx(4.9 / 20)
    assert workers.loc["gpu0", "preparations"] == 2


def test_certifying_is_a_share_of_its_own_beside_evaluating_and_preparing() -> None:
    # gpu0 over a 20 s span: screens 5 s (1 s of it setup), certifies 8 s (2 s of it setup)
    rows = [timed("a", "gpu0", 0, 5.0, setup_s=1.0),
            timed("c", "gpu0", 5, 8.0, setup_s=2.0, tier="certify", certified=True, certifies="a"),
            timed("b", "gpu1", 0, 20.0, setup_s=0.0)]
    workers = costs.worker_occupancy(frame(rows)).set_index("worker")
    assert workers.loc["gpu0", ["evaluating", "certifying", "preparing", "idle"]].tolist() == \
        pytest.approx([4 / 20, 6 / 20, 3 / 20, 7 / 20])
    assert workers.loc["gpu1", ["evaluating", "certifying"]].tolist() == pytest.approx([1.0, 0.0])
    old = frame(rows).drop(columns=["tier", "certified", "certifies"])  # a lineage from before the tiers
    before = costs.worker_occupancy(old).set_index("worker")
    assert before.loc["gpu0", ["evaluating", "certifying", "preparing"]].tolist() == pytest.approx([10 / 20, 0, 3 / 20])
