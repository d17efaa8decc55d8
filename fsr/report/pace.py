"""The model's side of a run's pace, from its call log (`llm_cache/calls.jsonl`): per model,
calls, latency median and p90, requests in flight (time average and most at once), calls
retried and failed. The GPU side is `costs.worker_occupancy`; together they say which side set
the pace. Pure DataFrame functions, plus the reader of the log."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

COLUMNS = ["model", "calls", "latency_p50_s", "latency_p90_s", "in_flight_mean", "in_flight_max", "retried", "failed"]


def read_calls(run_dir: str | Path) -> pd.DataFrame:
    """The calls a run made to its endpoint (replayed answers left out): model, ended (UTC),
    seconds, attempts, error. Empty for a run without a model."""
    path = Path(run_dir) / "llm_cache" / "calls.jsonl"
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue  # a line cut short by a killed run
            if not doc.get("cached") and doc.get("seconds") is not None:
                rows.append({"model": doc.get("model", ""), "ended": doc.get("at"), "seconds": float(doc["seconds"]),
                             "attempts": int(doc.get("attempts") or 1), "error": doc.get("error")})
    frame = pd.DataFrame(rows, columns=["model", "ended", "seconds", "attempts", "error"])
    frame["ended"] = pd.to_datetime(frame["ended"], utc=True)
    return frame


def model_pace(calls: pd.DataFrame) -> pd.DataFrame:
    """One row per model (see the module docstring); requests in flight are counted over the
    span from the first call's start to the last call's end."""
    if calls.empty:
        return pd.DataFrame(columns=COLUMNS)
    out = []
    for model, rows in calls.groupby("model"):
        ends = (rows["ended"] - rows["ended"].min()).dt.total_seconds()
        starts = ends - rows["seconds"]
        span = max(ends.max() - starts.min(), 1e-9)
        events = pd.concat([pd.Series(1, index=starts), pd.Series(-1, index=ends)]).sort_index(kind="stable")
        out.append({"model": model, "calls": len(rows), "latency_p50_s": rows["seconds"].median(),
                    "latency_p90_s": rows["seconds"].quantile(0.9), "in_flight_mean": rows["seconds"].sum() / span,
                    "in_flight_max": int(events.cumsum().max()), "retried": int((rows["attempts"] > 1).sum()),
                    "failed": int(rows["error"].notna().sum())})
    return pd.DataFrame(out, columns=COLUMNS)
