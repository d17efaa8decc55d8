"""The report's certification table (docs/judge.md, "Two tiers"): per task, how many of its
results were certified, how many certifications failed and at which set or check, and whether the
result the report counts is a certified one. Empty for a run that certified nothing."""

from __future__ import annotations

import pandas as pd

COLUMNS = ("task", "certifications", "passed", "failed", "failed_at")
HEADERS = {"task": "task", "certifications": "certifications", "passed": "passed", "failed": "failed",
           "failed_at": "failed at (how many)"}
NOTE = ("certifications: screened results judged again on inputs drawn from entropy, with the stress sets and "
        "the full timing protocol, before they count; failed at: the set or check that failed.")


def certification_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per task with a certification row in the lineage, by task name."""
    if frame.empty or "tier" not in frame.columns or not (frame["tier"] == "certify").any():
        return pd.DataFrame(columns=list(COLUMNS))
    rows = frame[frame["tier"] == "certify"]
    out = []
    for task, group in rows.groupby("task", sort=True):
        passed = group["certified"].eq(True)
        failed = group[~passed]
        checks = failed["failed_check"] if "failed_check" in failed.columns else pd.Series(dtype=object)
        reasons = checks.where(checks.notna() & checks.ne(""), failed["verdict"].astype(str).str.lower())
        counts = reasons.value_counts(sort=True)
        out.append({"task": task, "certifications": len(group), "passed": int(passed.sum()), "failed": len(failed),
                    "failed_at": "; ".join(f"{reason} ({n})" for reason, n in counts.items())})
    return pd.DataFrame(out, columns=list(COLUMNS))


def certification_line(table: pd.DataFrame, tasks: int) -> str:
    """One sentence over the table: certifications, failures, tasks with a certified result."""
    if table.empty:
        return ""
    done, failed = int(table["certifications"].sum()), int(table["failed"].sum())
    certified = int((table["passed"] > 0).sum())
    return (f"Certification: {done} certification{'s' if done != 1 else ''}, {failed} failed; "
            f"{certified} of {tasks} tasks have a certified result.")
