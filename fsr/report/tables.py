"""The report's tables: pure functions from lineage DataFrames (`fsr.lineage.read_pandas`) to
DataFrames. No I/O, no plotting; every figure on the page and in `fsr bench` comes from here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fsr.types import Verdict

VERDICTS = tuple(v.value for v in Verdict)
SUMMARY_COLUMNS = (
    "task", "dtype", "device", "evaluations", "best_us", "p10_us", "p90_us", "gbps", "tflops", "registers",
    "spill_bytes", "ceiling_fraction", "ceiling_us", "baseline_us", "library_us", "torch_us", "torch_compile_us",
    "torch_compile_s", "lead", "lead_us", "speedup_lead", "speedup_baseline", "speedup_library", "speedup_torch",
    "speedup_torch_compile", "speedup_pytorch", "evals_per_gpu_minute", "verdicts", *VERDICTS,
)
# The implementations a user would otherwise call, fastest first wins the task's `lead`: the
# comparator that matters (the plain baseline kernel is a starting point, not one of them).
LEADS = {"library_us": "library", "torch_us": "PyTorch eager", "torch_compile_us": "torch.compile"}


def timed_ok(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows with an OK verdict and a measured median: the only ones whose latency counts."""
    return frame[(frame["verdict"] == Verdict.OK.value) & frame["median_us"].notna()]


def start_times(frame: pd.DataFrame) -> pd.Series:
    """When each evaluation began: `started_at`, else its finish less its wall time."""
    finished = pd.to_datetime(frame["finished_at"], utc=True)
    fallback = finished - pd.to_timedelta(frame["wall_s"].fillna(0.0), unit="s")
    if "started_at" not in frame:
        return fallback
    return pd.to_datetime(frame["started_at"], utc=True).fillna(fallback)


def gpu_minutes(frame: pd.DataFrame) -> float:
    """The span from the first evaluation's start to the last one's finish, times the workers
    that served these rows, in minutes: the GPU time the run held, idle or busy."""
    if frame.empty:
        return 0.0
    span_s = (pd.to_datetime(frame["finished_at"], utc=True).max() - start_times(frame).min()).total_seconds()
    return max(span_s, 0.0) * max(frame["worker"].nunique(), 1) / 60.0


def task_gpu_minutes(frame: pd.DataFrame) -> pd.Series:
    """Per task, its share of the run's GPU-minutes (`gpu_minutes`): in proportion to the time
    workers spent evaluating it (`wall_s`), so the tasks of a campaign that share the GPUs split
    the whole held time, idle included, and the shares add up to it. A run with no recorded
    wall time splits by each task's own span instead."""
    busy = frame.groupby("task")["wall_s"].sum()
    if busy.sum() <= 0:
        return frame.groupby("task").apply(gpu_minutes, include_groups=False)
    return gpu_minutes(frame) * busy / busy.sum()


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or pd.isna(numerator) or pd.isna(denominator):
        return None
    if not numerator or not denominator:  # a 0 comparator: not timed (an early lineage's no-baseline task)
        return None
    return float(numerator) / float(denominator)


def _value(row: pd.Series | None, column: str) -> float | None:
    if row is None or column not in row.index or pd.isna(row[column]):
        return None
    return float(row[column])


def _reference(best: pd.Series | None, rows: pd.DataFrame, column: str) -> float | None:
    """A comparator's time as recorded with the best kernel, else with any of the task's rows (a
    task with no correct kernel still shows what PyTorch takes)."""
    value = _value(best, column)
    if value is not None or column not in rows:
        return value
    known = pd.to_numeric(rows[column], errors="coerce").dropna()
    known = known[known > 0]
    return float(known.iloc[0]) if len(known) else None


def _lead(refs: dict[str, float | None]) -> tuple[str | None, float | None]:
    """The fastest of the library, PyTorch eager and torch.compile that was timed, and its time."""
    timed = [(us, LEADS[c]) for c, us in refs.items() if c in LEADS and us]
    return (min(timed)[1], min(timed)[0]) if timed else (None, None)


def _task_row(task: str, rows: pd.DataFrame, minutes: float) -> dict[str, object]:
    ok = timed_ok(rows)
    best = ok.loc[ok["median_us"].idxmin()] if not ok.empty else None
    devices = rows["device"][rows["device"] != ""]
    device = best["device"] if best is not None else (devices.mode().iat[0] if not devices.empty else "")
    counts = rows["verdict"].value_counts()
    best_us = _value(best, "median_us")
    fraction = _value(best, "ceiling_fraction")
    refs = {c: _reference(best, rows, c) for c in ("baseline_us", "library_us", "torch_us", "torch_compile_us")}
    pytorch = [v for v in (refs["torch_us"], refs["torch_compile_us"]) if v]
    dtypes = rows["dtype"].dropna() if "dtype" in rows else pd.Series(dtype=object)
    dtypes = dtypes[dtypes != ""]
    lead, lead_us = _lead(refs)
    return {
        "task": task, "dtype": dtypes.iat[0] if len(dtypes) else None, "device": device, "evaluations": len(rows), "best_us": best_us,
        **{c: _value(best, c) for c in ("p10_us", "p90_us", "gbps", "tflops")},
        **{c: None if (v := _value(best, c)) is None else int(v) for c in ("registers", "spill_bytes")},
        "ceiling_fraction": fraction,
        "ceiling_us": best_us * fraction if best_us is not None and fraction is not None else None,
        **refs, "lead": lead, "lead_us": lead_us, "speedup_lead": _ratio(lead_us, best_us),
        "speedup_baseline": _ratio(refs["baseline_us"], best_us),
        "speedup_library": _ratio(refs["library_us"], best_us),
        "speedup_torch": _ratio(refs["torch_us"], best_us),
        "speedup_torch_compile": _ratio(refs["torch_compile_us"], best_us),
        "speedup_pytorch": _ratio(min(pytorch), best_us) if pytorch else None,  # the better of the two
        "torch_compile_s": _reference(best, rows, "torch_compile_s"),
        "evals_per_gpu_minute": len(rows) / minutes if minutes > 0 else None,
        "verdicts": ", ".join(f"{v} {n}" for v, n in counts.items()),
        **{v: int(counts.get(v, 0)) for v in VERDICTS},
    }


def task_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per task (sorted by name): the device, the evaluations, the best OK kernel's
    median (`best_us`), its spread (`p10_us`, `p90_us`: its timing's 10th and 90th percentiles),
    rates (`gbps`, `tflops`) and resources (`registers`, `spill_bytes`), its fraction of the
    device ceiling and the latency that ceiling allows (`ceiling_us`), the baseline, library,
    PyTorch eager and torch.compile latencies recorded with it, the fastest of the last three
    (`lead`, `lead_us`: the comparator that matters) and the best's speedup over each (None
    where one is absent, e.g. lineages without `torch_us`),
    evaluations per GPU-minute (see `task_gpu_minutes`), the verdict mix as text (`verdicts`) and one
    count column per Verdict. A task with no correct kernel has None for every latency."""
    minutes = task_gpu_minutes(frame) if not frame.empty else pd.Series(dtype=float)
    rows = [_task_row(str(task), group, float(minutes[task])) for task, group in frame.groupby("task", sort=True)]
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


SPEEDUPS = ("speedup_lead", "speedup_baseline", "speedup_library", "speedup_torch", "speedup_torch_compile",
            "speedup_pytorch")


def speedup_geomeans(summary: pd.DataFrame) -> pd.DataFrame:
    """Per speedup column of `task_summary`: the geometric mean over the tasks where that
    comparator was measured (as `fsr bench`'s table), and how many tasks that is. Columns:
    column, geomean (missing where no task has one), tasks."""
    rows = []
    for column in SPEEDUPS:
        values = _speedups(summary, column).dropna()
        values = values[values > 0]
        rows.append({"column": column, "geomean": float(np.exp(np.log(values).mean())) if len(values) else None,
                     "tasks": len(values)})
    return pd.DataFrame(rows, columns=["column", "geomean", "tasks"])


def _speedups(summary: pd.DataFrame, column: str) -> pd.Series:
    """A speedup column as numbers; all missing where the summary has no such column."""
    if column not in summary:
        return pd.Series(np.nan, index=summary.index, dtype=float)
    return pd.to_numeric(summary[column], errors="coerce")


FAST_P = (0.0, 1.0, 2.0)
COMPARATOR_NAMES = {"speedup_lead": "the fastest of the library, PyTorch eager and torch.compile",
                    "speedup_baseline": "baseline", "speedup_library": "library", "speedup_torch": "PyTorch eager",
                    "speedup_torch_compile": "torch.compile",
                    "speedup_pytorch": "the better of PyTorch eager and torch.compile"}


def fast_p(summary: pd.DataFrame, thresholds: tuple[float, ...] = FAST_P) -> pd.DataFrame:
    """KernelBench's fast_p, per comparator: the fraction of ALL the summary's tasks whose best
    kernel is correct and more than p times faster than that comparator; fast_0 is the fraction
    with a correct kernel at all. A task whose comparator was not timed, or that has no correct
    kernel, counts as not fast (it stays in the denominator), so figures over different campaigns
    compare. A speedup counts as more than p where it does at the two decimals the report
    shows it with (1.00x is not faster than 1). Columns: column, comparator, tasks, measured (tasks with that speedup), then
    fast_<p> (a fraction, missing for an empty summary) and fast_<p>_tasks (a count) per threshold."""
    tasks = len(summary)
    correct = int(pd.to_numeric(summary["best_us"], errors="coerce").notna().sum()) if tasks else 0
    rows = []
    for column in SPEEDUPS:
        speedup = _speedups(summary, column)
        row: dict[str, object] = {"column": column, "comparator": COMPARATOR_NAMES[column], "tasks": tasks,
                                  "measured": int(speedup.notna().sum())}
        for p in thresholds:
            # faster as the page shows it: 0.9998x reads 1.00x, and is not counted faster than 1
            count = correct if p == 0 else int((speedup.round(2) > p).sum())
            row[f"fast_{p:g}"] = count / tasks if tasks else None
            row[f"fast_{p:g}_tasks"] = count
        rows.append(row)
    return pd.DataFrame(rows)


def fast_p_text(table: pd.DataFrame, thresholds: tuple[float, ...] = FAST_P) -> list[str]:
    """One line per comparator that was measured somewhere: "PyTorch eager: fast_0 3/4 (75%), ..."."""
    lines = []
    for r in table.to_dict("records"):
        if not r["measured"]:
            continue
        cells = [f"fast_{p:g} {r[f'fast_{p:g}_tasks']}/{r['tasks']}"
                 + (f" ({r[f'fast_{p:g}']:.0%})" if r[f"fast_{p:g}"] is not None else "") for p in thresholds]
        lines.append(f"vs {r['comparator']} (measured for {r['measured']}): {', '.join(cells)}")
    return lines


def ceiling_us(frame: pd.DataFrame) -> pd.Series:
    """Per task, the latency the device's measured ceiling allows (copy bandwidth or SGEMM
    rate, whichever binds): a timed row's median times its fraction of the ceiling, the same
    figure for every row of a task on one device; the median over rows guards against rounding."""
    ok = timed_ok(frame).dropna(subset=["ceiling_fraction"])
    return (ok["median_us"] * ok["ceiling_fraction"]).groupby(ok["task"]).median()


def _finish_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in the order their results came back, with `evaluation` (1-based, per task) and
    `elapsed_s` (since the first evaluation of the run began)."""
    out = frame.assign(_finished=pd.to_datetime(frame["finished_at"], utc=True))
    out = out.sort_values(["_finished", "candidate_id"], kind="stable")
    t0 = start_times(frame).min()
    out["evaluation"] = out.groupby("task").cumcount() + 1
    out["elapsed_s"] = (out["_finished"] - t0).dt.total_seconds()
    return out.drop(columns="_finished")


def best_so_far(frame: pd.DataFrame) -> pd.DataFrame:
    """Best-so-far latency per task, per island ("island N") and over all ("all islands"), as
    steps: one point where the best improved and one at the task's last evaluation, so a curve
    drawn as steps to that point is exact whatever the lineage's length. Columns: task, series,
    evaluation (the task's results so far, all islands counted, so islands share an axis),
    elapsed_s, best_us."""
    ordered = _finish_order(frame)
    last = ordered.groupby("task")[["evaluation", "elapsed_s"]].max()
    ok = timed_ok(ordered)
    keys = ["task", "series", "evaluation", "elapsed_s", "best_us"]
    parts = []
    for group in (ok.assign(series="island " + ok["island"].astype(str)), ok.assign(series="all islands")):
        g = group.assign(best_us=group.groupby(["task", "series"])["median_us"].cummin())
        steps = g[g["best_us"] < g.groupby(["task", "series"])["best_us"].shift(fill_value=float("inf"))]
        ends = steps.groupby(["task", "series"], as_index=False).last()
        ends["evaluation"] = last.loc[ends["task"], "evaluation"].to_numpy()
        ends["elapsed_s"] = last.loc[ends["task"], "elapsed_s"].to_numpy()
        parts += [steps[keys], ends[keys]]
    if not parts or all(p.empty for p in parts):
        return pd.DataFrame(columns=keys)
    out = pd.concat(parts, ignore_index=True).drop_duplicates(["task", "series", "evaluation"])
    return out.sort_values(["task", "series", "evaluation"], ignore_index=True)


def verdict_mix(frame: pd.DataFrame, bins: int = 20) -> pd.DataFrame:
    """Verdict counts over time: each task's results, in the order they came back, cut into at
    most `bins` runs of equal length. Columns: task, first, last (evaluation numbers, 1-based),
    verdict, count (zero counts left out)."""
    ordered = _finish_order(frame)
    size = ordered.groupby("task")["evaluation"].transform("max")
    width = -(-size // bins)  # ceiling division: at most `bins` bins per task
    ordered["bin"] = (ordered["evaluation"] - 1) // width
    counts = ordered.groupby(["task", "bin", "verdict"]).size().rename("count").reset_index()
    edges = ordered.groupby(["task", "bin"])["evaluation"].agg(first="min", last="max").reset_index()
    out = counts.merge(edges, on=["task", "bin"])
    return out[["task", "first", "last", "verdict", "count"]].sort_values(["task", "first", "verdict"],
                                                                         ignore_index=True)
