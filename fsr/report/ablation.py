"""A campaign that alternates the model's diagnostics across islands (`llm.diagnostics_by_island`):
its islands side by side, with and without them, in one line per task."""

from __future__ import annotations

from typing import Any

import pandas as pd


def diagnostics_by_island(config: dict[str, Any]) -> bool:
    llm = config.get("llm", {}) if isinstance(config, dict) else {}
    return isinstance(llm, dict) and bool(llm.get("diagnostics", True)) and bool(llm.get("diagnostics_by_island"))


def diagnostics_lines(frame: pd.DataFrame, config: dict[str, Any]) -> list[str]:
    """"task: best 120 us on the islands shown diagnostics (0, 2; 40 evaluations), 150 us on the
    others (1, 3; 38)", one per task; none unless the run alternated them."""
    if not diagnostics_by_island(config) or frame.empty:
        return []
    lines = []
    for task, rows in frame.groupby("task", sort=True):
        halves = []
        for label, shown in (("on the islands shown diagnostics", True), ("on the others", False)):
            mine = rows[(rows["island"] % 2 == 0) == shown]
            ok = mine[(mine["verdict"] == "OK") & mine["median_us"].notna()]
            islands = ", ".join(str(i) for i in sorted(mine["island"].unique())) or "none"
            best = f"{ok['median_us'].min():.4g} us" if not ok.empty else "no correct kernel"
            halves.append(f"{best} {label} ({islands}; {len(mine)} evaluations)")
        lines.append(f"- {task}: best {halves[0]}, {halves[1]}")
    return ["Diagnostics alternated by island (llm.diagnostics_by_island):", "\n".join(lines)]
