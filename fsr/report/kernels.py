"""What the search learned about kernels, as pure DataFrame functions over a lineage: which
features paid off, what tuning chose, and the winner's chain of edits from its seed."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from fsr.propose.features import NAMES as CATALOGUE
from fsr.report.tables import timed_ok

EFFECT_COLUMNS = ("task", "feature", "over", "kernels_with", "kernels_without", "ok_share_with", "ok_share_without",
                  "speedup_with", "speedup_without", "effect")


def _geomean(values: pd.Series) -> float:
    values = values.dropna()
    return float(np.exp(np.log(values).mean())) if len(values) else float("nan")


def _reference(rows: pd.DataFrame) -> tuple[str, pd.Series]:
    """What a task's kernels' speedups are over: each row's baseline, or for a task without one
    (an imported task) PyTorch eager, its rows before the comparator came back given the
    task's first time of it."""
    baseline = pd.to_numeric(rows["baseline_us"], errors="coerce")
    torch = pd.to_numeric(rows["torch_us"], errors="coerce") if "torch_us" in rows else baseline * float("nan")
    if baseline.notna().any() or not torch.notna().any():
        return "baseline", baseline
    return "PyTorch eager", torch.fillna(torch.dropna().iloc[0])


def _feature_row(task: str, feature: str, rows: pd.DataFrame, has: pd.Series) -> dict[str, object]:
    ok = rows["verdict"] == "OK"
    over, reference = _reference(rows)
    speedup = (reference / rows["median_us"]).where(ok & rows["median_us"].notna())
    with_, without = _geomean(speedup[has]), _geomean(speedup[~has])
    return {"task": task, "feature": feature, "over": over, "kernels_with": int(has.sum()),
            "kernels_without": int((~has).sum()),
            "ok_share_with": float(ok[has].mean()) if has.any() else float("nan"),
            "ok_share_without": float(ok[~has].mean()) if (~has).any() else float("nan"),
            "speedup_with": with_, "speedup_without": without, "effect": with_ / without}


def feature_effects(frame: pd.DataFrame) -> pd.DataFrame:
    """For every task and every feature of the catalogue (and any other the lineage names), the
    kernels whose source has it and those whose source lacks it (`features_detected`): how many,
    the share that came out correct, the geometric-mean speedup of the correct timed ones over
    `over` (the baseline, or PyTorch eager for a task without one), and `effect`, the ratio of those means (above 1: kernels with it were faster).
    Only the kernels the search proposed count: the seeds (baseline, template) are what it
    started from, and a feature that every proposed kernel has would otherwise be credited with
    the whole gain over the baseline, which merely lacks it. A feature that no proposed kernel
    has, or that every one has, is left out: there is nothing to compare."""
    out = []
    if "proposer" in frame:
        frame = frame[frame["proposer"] != "seed"]
    for task, rows in frame.groupby("task", sort=True):
        detected = rows["features_detected"].map(lambda xs: frozenset(xs) if xs is not None else frozenset())
        seen = frozenset().union(*detected)
        for feature in [*CATALOGUE, *sorted(seen - set(CATALOGUE))]:
            has = detected.map(lambda xs, f=feature: f in xs).astype(bool)
            if has.any() and not has.all():
                out.append(_feature_row(str(task), feature, rows, has))
    return pd.DataFrame(out, columns=list(EFFECT_COLUMNS))


def _pairs_long(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """One row per (row, define) of a list-of-{name, value} column: the frame's index as `row`,
    then `tunable` and `value`."""
    exploded = frame[column].explode().dropna()
    pairs = pd.DataFrame(exploded.tolist(), index=exploded.index)
    if pairs.empty:
        return pd.DataFrame(columns=["row", "tunable", "value"])
    return pairs.rename(columns={"name": "tunable"}).rename_axis("row").reset_index()


def tuning_spread(trials: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """Per task, tunable and value: the tuning trials that tried it (`trials`), the median over
    them of the trial's latency relative to the best trial of the same candidate (`median_ratio`,
    1.0 = that candidate's best; comparable across candidates), the infeasible trials, and how
    many correct kernels ended with that value (`chosen`)."""
    columns = ["task", "tunable", "value", "trials", "infeasible", "median_ratio", "chosen"]
    if trials.empty:
        return pd.DataFrame(columns=columns)
    task_of = frame.drop_duplicates("candidate_id").set_index("candidate_id")["task"]
    t = trials.assign(task=trials["candidate_id"].map(task_of)).dropna(subset=["task"]).reset_index(drop=True)
    best = t[t["feasible"]].groupby("candidate_id")["median_us"].min()
    t["ratio"] = t["median_us"] / t["candidate_id"].map(best)
    long = _pairs_long(t, "defines").join(t[["task", "feasible", "ratio"]], on="row")
    spread = long.groupby(["task", "tunable", "value"]).agg(
        trials=("feasible", "size"), infeasible=("feasible", lambda f: int((~f.astype(bool)).sum())),
        median_ratio=("ratio", "median")).reset_index()
    ok = timed_ok(frame).reset_index(drop=True)
    chosen = _pairs_long(ok, "tuned_defines").join(ok[["task"]], on="row")
    counts = chosen.groupby(["task", "tunable", "value"]).size().rename("chosen").reset_index()
    out = spread.merge(counts, on=["task", "tunable", "value"], how="left").fillna({"chosen": 0})
    out["chosen"] = out["chosen"].astype(int)
    return out[columns].sort_values(["task", "tunable", "value"], ignore_index=True)


def tuning_bars(spread: pd.DataFrame, task: str) -> pd.DataFrame:
    """One task's `tuning_spread` as the tuning figure draws it: per tunable and value, a label
    ("BLOCK=128"), how much slower than each candidate's best trial its trials ran in median
    (`slower_pct`: 0 for the best, 10 for 1.1x; a ratio axis from zero hides that difference),
    and whether every trial of it was infeasible (`slower_pct` is then None)."""
    mine = spread[spread["task"] == task]
    infeasible = (mine["infeasible"] >= mine["trials"]) | mine["median_ratio"].isna()
    return pd.DataFrame({
        "tunable": mine["tunable"].astype(str), "label": mine["tunable"].astype(str) + "=" + mine["value"].astype(str),
        "slower_pct": ((mine["median_ratio"] - 1.0) * 100.0).where(~infeasible),
        "infeasible": infeasible.astype(bool), "trials": mine["trials"], "chosen": mine["chosen"],
    }).reset_index(drop=True)


def _compiled(defines: Iterable[Mapping[str, Any]] | None, source: str) -> list[str]:
    """What the compiler saw, as lines: the candidate's defines, then its source (a template's
    feature toggles change only the defines)."""
    return ([f"#define {d['name']} {d['value']}\n" for d in (() if defines is None else defines)]
            + source.splitlines(True))


def winner_chain(frame: pd.DataFrame, task: str, ranked: pd.DataFrame | None = None) -> pd.DataFrame:
    """The best correct kernel of `task` and its ancestors, seed first: one row per step with
    its candidate id, move, detected features, verdict, latency, speedup over the baseline and
    the unified diff of its source against its (first) parent's. Empty if no kernel is correct.
    The walk stops at a parent the lineage does not hold (e.g. a killed run's lost batch).
    `ranked`: the rows the best is chosen from (the rows that count), if not `frame`'s."""
    columns = ["step", "candidate_id", "move", "features", "verdict", "median_us", "speedup", "diff"]
    rows = frame[frame["task"] == task]
    ok = timed_ok(rows if ranked is None else ranked[ranked["task"] == task])
    if ok.empty:
        return pd.DataFrame(columns=columns)
    # one row per candidate (a resumed run may hold a candidate twice: its timed row wins)
    by_id = rows.sort_values("median_us", na_position="last").drop_duplicates("candidate_id").set_index("candidate_id")
    first_parent = {cid: (ps[0] if ps is not None and len(ps) else None)
                    for cid, ps in zip(by_id.index, by_id["parents"], strict=True)}
    chain, current = [], ok.loc[ok["median_us"].idxmin(), "candidate_id"]
    seen = set()
    while current in first_parent and current not in seen:
        chain.append(current)
        seen.add(current)
        current = first_parent[current]
    chain.reverse()
    steps = by_id.loc[chain, ["move", "features_detected", "verdict", "median_us", "baseline_us", "defines",
                              "source"]].reset_index()
    compiled = [_compiled(d, src) for d, src in zip(steps["defines"], steps["source"], strict=True)]
    out = []
    for step, r in enumerate(steps.itertuples(index=False)):
        diff = "".join(difflib.unified_diff(compiled[step - 1], compiled[step], chain[step - 1], chain[step],
                                            n=2)) if step else ""
        out.append({"step": step, "candidate_id": r.candidate_id, "move": r.move,
                    "features": ", ".join(sorted(r.features_detected)), "verdict": r.verdict,
                    "median_us": r.median_us, "speedup": r.baseline_us / r.median_us, "diff": diff})
    return pd.DataFrame(out, columns=columns)
