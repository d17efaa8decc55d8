"""The model-pace table of a run's call log: latency percentiles, requests in flight, retried and
failed calls per model; replayed answers and a cut-off line left out."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fsr.report.pace import model_pace, read_calls


def write_log(run: Path, calls: list[dict[str, object]]) -> None:
    (run / "llm_cache").mkdir(parents=True)
    lines = [json.dumps(c) for c in calls] + ['{"model": "cut of']
    (run / "llm_cache" / "calls.jsonl").write_text("\n".join(lines) + "\n")


def test_latency_and_requests_in_flight_per_model(tmp_path: Path) -> None:
    t0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    calls: list[dict[str, object]] = [{"model": "m", "at": (t0 + timedelta(seconds=10 + i)).isoformat(), "seconds": 10.0, "attempts": 1,
              "error": None} for i in range(10)]  # started 1 s apart, 10 s each: 10 in flight at most
    calls += [{"model": "m", "at": (t0 + timedelta(seconds=20)).isoformat(), "seconds": 30.0, "attempts": 3,
               "error": "gave up"},
              {"model": "m", "at": t0.isoformat(), "samples": [0], "cached": True, "error": None},  # replayed
              {"model": "other", "at": t0.isoformat(), "seconds": 2.0, "attempts": 1, "error": None}]
    write_log(tmp_path, calls)
    table = model_pace(read_calls(tmp_path)).set_index("model")
    m = table.loc["m"]
    assert m["calls"] == 11 and m["latency_p50_s"] == 10.0 and m["latency_p90_s"] == pytest.approx(10.0)
    assert m["in_flight_max"] == 11 and m["retried"] == 1 and m["failed"] == 1
    assert m["in_flight_mean"] == pytest.approx((10 * 10 + 30) / 30)  # busy seconds over a 30-s span
    assert table.loc["other", "calls"] == 1


def test_a_run_without_a_model_has_an_empty_table(tmp_path: Path) -> None:
    assert model_pace(read_calls(tmp_path)).empty
