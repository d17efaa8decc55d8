"""The report's figures of the two tiers (docs/judge.md, "Two tiers"): the certification table
(per task, how many of its results were certified, how many certifications failed and at which set
or check, and the best kernel as its certification timed it; empty for a run that certified
nothing), and per task the screenings that took a
shortcut (timing cut short, answered from an earlier judgement)."""

from __future__ import annotations

import pandas as pd

from fsr.certification import certified_timings, shortcut_words

COLUMNS = ("task", "certifications", "passed", "failed", "failed_at", "best_certified")
HEADERS = {"task": "task", "certifications": "certifications", "passed": "passed", "failed": "failed",
           "failed_at": "failed at (how many)", "best_certified": "best as certified"}
NOTE = ("certifications: screened results judged again on inputs drawn from entropy, with the stress sets and "
        "the full timing protocol, before they count; failed at: the set or check that failed; best as "
        "certified: the task's best kernel as its certification timed it, against its screened median (the "
        "least of the task's screenings, the figure the tables give) and, where timed, against the same program "
        "load on the screening's own sets right after (screening sets).")


def certification_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per task with a certification row in the lineage, by task name."""
    if frame.empty or "tier" not in frame.columns or not (frame["tier"] == "certify").any():
        return pd.DataFrame(columns=list(COLUMNS))
    rows = frame[frame["tier"] == "certify"]
    again = certified_timings(frame)
    out = []
    for task, group in rows.groupby("task", sort=True):
        passed = group["certified"].eq(True)
        failed = group[~passed]
        checks = failed["failed_check"] if "failed_check" in failed.columns else pd.Series(dtype=object)
        reasons = checks.where(checks.notna() & checks.ne(""), failed["verdict"].astype(str).str.lower())
        counts = reasons.value_counts(sort=True)
        best = again.get(str(task))
        out.append({"task": task, "certifications": len(group), "passed": int(passed.sum()), "failed": len(failed),
                    "failed_at": "; ".join(f"{reason} ({n})" for reason, n in counts.items()),
                    "best_certified": _as_certified(*best) if best and best[0] else ""})
    return pd.DataFrame(out, columns=list(COLUMNS))


def _as_certified(screened_us: float, certified_us: float, control_us: float | None) -> str:
    """`20.5 us (+2.5%; screening sets +0.3%)`: the certified median, over the screened one and
    over the same load's median on the screening's own sets where it was timed."""
    pair = f"; screening sets {certified_us / control_us - 1:+.1%}" if control_us else ""
    return f"{certified_us:,.1f} us ({certified_us / screened_us - 1:+.1%}{pair})"


def certification_line(table: pd.DataFrame, tasks: int) -> str:
    """One sentence over the table: certifications, failures, tasks with a certified result."""
    if table.empty:
        return ""
    done, failed = int(table["certifications"].sum()), int(table["failed"].sum())
    certified = int((table["passed"] > 0).sum())
    return (f"Certification: {done} certification{'s' if done != 1 else ''}, {failed} failed; "
            f"{certified} of {tasks} tasks have a certified result.")


SHORTCUT_COLUMNS = ("task", "cut_short", "answered_from", "screening")
SCREENING_NOTE = ("screening: candidates whose timing was cut short (their first samples were already clearly "
                  "slower than the task's best, so timing stopped there), and candidates answered from an earlier judgement of the same compiled "
                  "program (a comment or a renamed local changed, the program did not: no GPU time spent).")


def shortcut_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """Per task with any screening row: how many screenings were cut short, how many were
    answered from an earlier judgement, and both as words (`screening`: only the non-zero ones;
    empty where neither happened). A lineage from before the columns counts none."""
    screened = frame[frame["tier"].ne("certify")] if "tier" in frame else frame
    cut = screened["cut_short"].eq(True) if "cut_short" in screened else pd.Series(False, index=screened.index)
    earlier = screened["answered_from"] if "answered_from" in screened else pd.Series(None, index=screened.index)
    answered = earlier.notna() & earlier.ne("")
    out = pd.DataFrame({"task": screened["task"], "cut_short": cut.astype(int), "answered_from": answered.astype(int)})
    out = out.groupby("task", sort=True)[["cut_short", "answered_from"]].sum().reset_index()
    out["screening"] = [shortcut_words(c, a) for c, a in zip(out["cut_short"], out["answered_from"], strict=True)]
    return out[list(SHORTCUT_COLUMNS)]


