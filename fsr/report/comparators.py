"""The comparators each task's best kernel should be read against, and those that were not timed,
with why, as far as the lineage and run.json record it.

What matters is what a user would otherwise call: the library and PyTorch (eager and
torch.compile) for a built-in task, PyTorch eager and torch.compile for an imported one (it has
no baseline kernel and no library). A worker times them beside a task's first candidates and
logs why one failed; the lineage keeps only their times. Those still being timed when a campaign
ended by itself are asked for then, within a bound, and kept in run.json (`comparators`), which
`with_recorded` adds to the lineage's rows; run.json's campaign entry says which were left, and
why. So a comparator with no time on any of a task's rows failed, or was left (its reason said),
or the campaign was stopped before it came back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

COMPARATORS = {"library_us": "library", "torch_us": "PyTorch eager", "torch_compile_us": "torch.compile"}
SPEEDUP_OF = {"library_us": "speedup_library", "torch_us": "speedup_torch",
              "torch_compile_us": "speedup_torch_compile"}
MISSING_COLUMNS = ["task", "comparator", "column", "reason"]
LOG = "the worker's log says which"
OFF = 'off in this run\'s config (eval.torch_compile = "off")'
WHY = {
    "library_us": f"the task has no library function, or timing it failed ({LOG})",
    "torch_us": f"PyTorch eager failed on it, or the task has no PyTorch version ({LOG})",
    "torch_compile_us": "torch.compile failed on it (the worker's log has the error)",
}
# A library the task names that has no figure: it refused the benchmark size or failed there
# (cuDNN's attention pinned: reference.py's library() raises rather than time another backend).
NAMED_WHY = (f"{{name}} refused the benchmark size or failed there, and no other backend is timed in its "
             f"place ({LOG})")
TASKS_NAMED = 8  # tasks named in one line; the rest are counted


def _present(value: object) -> bool:
    return value is not None and value == value and bool(value)


def expected(row: Mapping[str, Any]) -> list[str]:
    """The comparator columns that matter for a task's summary row: an imported task (no
    baseline) is PyTorch's alone."""
    imported = not _present(row.get("baseline_us"))
    return [c for c in COMPARATORS if not (imported and c == "library_us")]


RECORDED = ("library_us", "torch_us", "torch_compile_us", "torch_compile_s")  # run.json's comparator figures


def library_names(info: Mapping[str, Any]) -> dict[str, str]:
    """Per task, what its library comparator is ("cuDNN SDPA"), as run.json's `libraries` keeps
    the task.toml `library` of each task that names one (a run from before names none)."""
    named = info.get("libraries")
    if not isinstance(named, Mapping):
        return {}
    return {str(task): name for task, name in named.items() if isinstance(name, str) and name}


def library_label(name: str | None) -> str:
    """The library comparator as a table names it: "library (cuDNN SDPA)", or "library"."""
    return f"library ({name})" if name else "library"


def with_library_names(summary: pd.DataFrame, info: Mapping[str, Any]) -> pd.DataFrame:
    """The summary with each task's `library_name` ("" where the task names none), and a `lead`
    that is its library named so ("library (cuDNN SDPA)")."""
    names = library_names(info)
    out = summary.copy()
    out["library_name"] = [names.get(str(t), "") for t in out["task"]] if len(out) else pd.Series(dtype=object)
    if len(out) and "lead" in out:
        out["lead"] = [library_label(n) if lead == "library" else lead
                       for lead, n in zip(out["lead"], out["library_name"], strict=True)]
    return out


def with_recorded(frame: pd.DataFrame, info: Mapping[str, Any]) -> pd.DataFrame:
    """`frame` (lineage rows) with the comparator figures run.json keeps (those timed after a
    campaign's last evaluation) filled in where a row of that task, measured on that GPU model,
    has none; the lineage's own figures stand."""
    recorded = info.get("comparators")
    if not isinstance(recorded, Mapping) or not recorded or frame.empty or "task" not in frame:
        return frame
    out = frame.copy()
    for task, entry in recorded.items():
        if not isinstance(entry, Mapping):
            continue
        rows = out["task"] == task
        device = entry.get("device") or ""
        if device and "device" in out:
            rows &= out["device"].isin([device, ""])
        for column in RECORDED:
            value = entry.get(column)
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            if column not in out:
                out[column] = float("nan")
            out.loc[rows & out[column].isna(), column] = float(value)
    return out


def recorded_figures(info: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per task, the comparator figures run.json keeps (`with_recorded` fills lineage rows with
    them; a task the campaign never evaluated has no row, and its figures are these alone)."""
    recorded = info.get("comparators")
    if not isinstance(recorded, Mapping):
        return {}
    out: dict[str, dict[str, float]] = {}
    for task, entry in recorded.items():
        if isinstance(entry, Mapping):
            figures = {c: float(v) for c in RECORDED if isinstance(v := entry.get(c), int | float)
                       and not isinstance(v, bool)}
            if figures:
                out[str(task)] = figures
    return out


def _left(info: Mapping[str, Any], task: str) -> str:
    """Why the last campaign's wait for comparators left `task` without them, or ""."""
    campaigns = [c for c in info.get("campaigns") or [] if isinstance(c, Mapping)]
    waited = campaigns[-1].get("comparators") if campaigns else None
    left = waited.get("left") if isinstance(waited, Mapping) else None
    return str(left.get(task) or "") if isinstance(left, Mapping) else ""


def _none_back(info: Mapping[str, Any], task: str = "") -> str:
    left = _left(info, task)
    if left:
        return (f"no comparator of the task came back: they are timed beside its first candidates, and asked "
                f"for after the campaign's last evaluation, where it was left: {left}")
    campaigns = [c for c in info.get("campaigns") or [] if isinstance(c, Mapping)]
    ended = (f"the campaign ended first (stopped by {campaigns[-1].get('stopped_by') or '?'})" if campaigns
             else "the campaign is still going, or was stopped first")
    return (f"no comparator of the task came back: they are timed beside its first candidates, and {ended} "
            f"or timing them failed ({LOG})")


def _compile_off(info: Mapping[str, Any]) -> bool:
    config = info.get("config")
    section = config.get("eval") if isinstance(config, Mapping) else None
    return isinstance(section, Mapping) and section.get("torch_compile") == "off"


def not_timed(summary: pd.DataFrame, info: Mapping[str, Any]) -> pd.DataFrame:
    """Per task and comparator that matters but has no time: the comparator's name ("library
    (cuDNN SDPA)" where the task names its library), its summary speedup column, and why it was
    not timed (the config, the campaign's end, a failure, a named library's refusal)."""
    off = _compile_off(info)
    names = library_names(info)
    out = []
    for row in summary.to_dict("records"):
        came_back = any(_present(row.get(c)) for c in ("library_us", "torch_us"))
        for column in expected(row):
            if _present(row.get(column)):
                continue
            if column == "torch_compile_us" and off:
                reason = OFF
            elif not came_back:
                reason = _none_back(info, row["task"])
            elif column == "torch_compile_us" and not _present(row.get("torch_us")):
                reason = "it is timed once PyTorch eager is, which was not"
            elif column == "library_us" and names.get(str(row["task"])):
                reason = NAMED_WHY.format(name=names[str(row["task"])])
            else:
                reason = WHY[column]
            comparator = library_label(names.get(str(row["task"]))) if column == "library_us" else COMPARATORS[column]
            out.append({"task": row["task"], "comparator": comparator, "column": SPEEDUP_OF[column],
                        "reason": reason})
    return pd.DataFrame(out, columns=MISSING_COLUMNS)


def _names(items: list[str], every: int | None = None) -> str:
    """"a, b and c"; "every task" where `items` are all `every` tasks; long lists counted."""
    if every is not None and every > 1 and len(items) == every:
        return "every task"
    shown = items[:TASKS_NAMED]
    rest = f" and {len(items) - len(shown)} more" if len(items) > len(shown) else ""
    if rest or len(shown) < 2:
        return ", ".join(shown) + rest
    return ", ".join(shown[:-1]) + " and " + shown[-1]


def not_timed_lines(missing: pd.DataFrame, tasks: int) -> list[str]:
    """`not_timed` as a few lines: the tasks that share comparators and a reason, each once:
    "PyTorch eager and torch.compile, for gelu and scan: no comparator of the task came back..."."""
    if missing.empty:
        return []
    which = missing.groupby(["task", "reason"], sort=False)["comparator"].agg(lambda c: _names(list(c)))
    lines = []
    for (comparators, reason), group in which.reset_index().groupby(["comparator", "reason"], sort=False):
        lines.append(f"{comparators}, for {_names(list(group['task']), tasks)}: {reason}.")
    return lines
