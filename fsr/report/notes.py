"""What the report says in words beside its tables: when a run started and whether its
campaigns ended, which tasks' searches stopped short of their budget and why (or never beat the
kernel they started from), and where each task's winner is, its spread, rate and resources, and
what tuning chose for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from fsr.config import SearchConfig
from fsr.report.ceilings import rate_text
from fsr.report.data import RunTables
from fsr.report.tables import timed_ok


def readable_time(value: Any) -> str:
    """A timestamp as "2026-11-25 14:03 UTC" (run.json's ISO text carries microseconds); "?"
    where there is none, the text itself where it is no time."""
    if value is None or value == "":
        return "?"
    try:
        stamp = pd.Timestamp(value)
    except (ValueError, TypeError):
        return str(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return f"{stamp:%Y-%m-%d %H:%M} UTC"


def _campaigns(info: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in info.get("campaigns") or [] if isinstance(c, Mapping)]


def campaign_note(t: RunTables) -> str:
    """Whether the run's campaigns ended, from run.json (or its exported best/ kernels, which
    are written when a campaign ends), and when the last evaluation finished."""
    run = t.run
    last = readable_time(pd.to_datetime(run.evaluations["finished_at"], utc=True).max())
    campaigns = _campaigns(run.info)
    if campaigns:
        stopped = campaigns[-1].get("stopped_by") or "?"
        count = f"{len(campaigns)} campaigns" if len(campaigns) > 1 else "The campaign"
        return f"{count} ended; the last was stopped by {stopped}. Last evaluation finished {last}."
    if (run.path / "best").is_dir():
        return f"The campaign ended (best/ holds its kernels). Last evaluation finished {last}."
    return (f"No campaign of this run recorded its end: it is still going, or it was stopped before it "
            f"could. Last evaluation finished {last}.")


def _budget(info: Mapping[str, Any]) -> int:
    search = (info.get("config") or {}).get("search") or {}
    value = search.get("max_evaluations") if isinstance(search, Mapping) else None
    return value if isinstance(value, int) else SearchConfig().max_evaluations


def stop_notes(t: RunTables) -> list[str]:
    """One line per task whose search stopped short of its evaluation budget, or whose best is
    still the kernel it started from, saying so and why where run.json recorded it."""
    info = t.run.info
    campaigns = _campaigns(info)
    last = campaigns[-1] if campaigns else {}
    recorded = last.get("tasks")
    recorded = recorded if isinstance(recorded, Mapping) else {}
    budget = _budget(info)
    lines = []
    for row in t.summary.itertuples(index=False):
        task, said = str(row.task), []
        entry = recorded.get(task)
        note = entry.get("note") if isinstance(entry, Mapping) else None
        if note:
            said.append(f"the search stopped early: {note}")
        elif row.evaluations < budget:
            why = f", stopped by {last['stopped_by']}" if last.get("stopped_by") else ""
            said.append(f"the search stopped after {row.evaluations} of {budget} evaluations{why}")
        chain = t.chains.get(task)
        if chain is not None and len(chain) == 1:
            said.append("its best is the kernel the search started from: no proposed kernel beat it")
        if said:
            lines.append(f"{task}: {'; '.join(said)}.")
    return lines


def winner_notes(t: RunTables) -> list[str]:
    """Per task with a correct kernel: the winner's latency, spread (p10-p90 of its samples),
    rate (as its ceiling counts it), registers per thread and bytes spilled to local memory,
    where it is (best/TASK.cu, written when the run ends) and the launch-parameter values tuning
    chose for it."""
    ok = timed_ok(t.run.evaluations)
    bounds = t.summary.set_index("task")["bound"] if "bound" in t.summary else pd.Series(dtype=object)
    lines = []
    for task, rows in ok.groupby("task", sort=True):
        best = rows.loc[rows["median_us"].idxmin()]
        chosen = best["tuned_defines"] if best["tuned_defines"] is not None and len(best["tuned_defines"]) else best["defines"]
        values = ", ".join(f"{d['name']}={d['value']}" for d in (chosen if chosen is not None else []))
        path = t.run.path / "best" / f"{task}.cu"
        where = str(path) if path.is_file() else "not exported (best/ is written when the run ends)"
        figures = [f"{best['candidate_id']} at {best['median_us']:.1f} us"]
        if pd.notna(best.get("p10_us")) and pd.notna(best.get("p90_us")):
            figures[0] += f" (p10-p90 {best['p10_us']:.1f}-{best['p90_us']:.1f} us)"
        rate = rate_text(best.get("gbps"), best.get("tflops"), bounds.get(task, ""))
        spilled = int(best["spill_bytes"])
        figures += [rate] if rate else []
        figures += [f"{int(best['registers'])} registers", f"{spilled:,} bytes spilled" if spilled else "no spills"]
        lines.append(f"{task}: {', '.join(figures)}, {values or 'no tunables'}; {where}")
    return lines
