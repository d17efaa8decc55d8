"""Where a run's time and money went, as pure DataFrame functions over a lineage: seconds per
stage, each worker's occupancy, model tokens and their cost."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from fsr.report.tables import start_times

STAGES = ("setup_s", "compile_s", "verify_s", "tune_s", "bench_s")
STAGE_NAMES = {"setup_s": "setup", "compile_s": "compile", "verify_s": "verify", "tune_s": "tune",
               "bench_s": "time", "other_s": "other"}


def stage_times(frame: pd.DataFrame) -> pd.DataFrame:
    """Per task, the seconds its evaluations spent in each stage (setup of the worker, compile,
    verify, tune, time) and in the rest of the evaluator's wall time (`other`: transfers, the
    child's bookkeeping), in total and per evaluation. Columns: task, stage, total_s,
    per_evaluation_s (stage `time`: timing the kernel and the check after it)."""
    rows = frame.assign(setup_s=frame["setup_s"].fillna(0.0))
    stages = rows[list(STAGES)]
    rows = rows.assign(other_s=(rows["wall_s"] - stages.sum(axis=1)).clip(lower=0.0))
    grouped = rows.groupby("task")
    totals = grouped[[*STAGES, "other_s"]].sum()
    long = totals.stack().rename("total_s").reset_index().rename(columns={"level_1": "stage"})
    long["stage"] = long["stage"].map(STAGE_NAMES)
    long["per_evaluation_s"] = long["total_s"] / long["task"].map(grouped.size())
    return long[["task", "stage", "total_s", "per_evaluation_s"]]


def stage_table(stages: pd.DataFrame, value: str = "per_evaluation_s") -> pd.DataFrame:
    """`stage_times` as one row per task and one column per stage, in pipeline order (setup,
    compile, verify, tune, time, other)."""
    order = [STAGE_NAMES[s] for s in (*STAGES, "other_s")]
    wide = stages.pivot(index="task", columns="stage", values=value)
    return wide.reindex(columns=[s for s in order if s in wide.columns]).reset_index().rename_axis(columns=None)


SETUP_PAID_S = 0.05  # an evaluation that waited this long on setup paid for a preparation (or a child's start)


def worker_occupancy(frame: pd.DataFrame) -> pd.DataFrame:
    """Per worker: its evaluations, the seconds charged to them (`busy_s`, the evaluator's wall
    time) and the part spent setting up (`setup_s`: starting the GPU child, preparing tasks), its
    occupancy (busy over the run's span, from the first evaluation's start to the last result)
    split into `evaluating` (screening candidates), `certifying` (judging screened results again,
    rows of tier "certify"; 0 in a lineage from before the tiers) and `preparing`, the rest
    `idle`; how many times it prepared its most
    prepared task (`preparations`: a campaign that keeps its working set prepares each once or
    twice); when it began its first evaluation and how long it sat idle after its last (seconds
    from the run's start and to its end); and `flag`, saying so where its occupancy is over 100%:
    impossible (its evaluations' charged times overlap, or the clocks that stamped them disagree)."""
    columns = ["worker", "device", "evaluations", "busy_s", "setup_s", "occupancy", "evaluating", "certifying",
               "preparing", "idle", "preparations", "first_start_s", "idle_end_s", "flag"]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    starts, finished = start_times(frame), pd.to_datetime(frame["finished_at"], utc=True)
    t0, end = starts.min(), finished.max()
    span_s = max((end - t0).total_seconds(), 1e-9)
    setup = frame["setup_s"].fillna(0.0)
    certifying = (frame["wall_s"] - setup).clip(lower=0.0).where(certify_rows(frame), 0.0)  # its setup is preparing
    rows = frame.assign(_start=(starts - t0).dt.total_seconds(), _finish=(finished - t0).dt.total_seconds(),
                        setup_s=setup, _certifying=certifying)
    out = rows.groupby("worker").agg(device=("device", "last"), evaluations=("wall_s", "size"),
                                     busy_s=("wall_s", "sum"), setup_s=("setup_s", "sum"),
                                     certifying_s=("_certifying", "sum"),
                                     first_start_s=("_start", "min"), last_finish_s=("_finish", "max"))
    out["occupancy"] = out["busy_s"] / span_s
    out["preparing"] = out["setup_s"].clip(upper=out["busy_s"]) / span_s
    out["certifying"] = out["certifying_s"] / span_s
    out["evaluating"] = (out["occupancy"] - out["preparing"] - out["certifying"]).clip(lower=0.0)
    out["idle"] = (1.0 - out["occupancy"]).clip(lower=0.0)
    paid = rows[paid_setup(rows) > SETUP_PAID_S].groupby(["worker", "task"]).size()
    out["preparations"] = paid.groupby(level="worker").max().reindex(out.index).fillna(0).astype(int)
    out["idle_end_s"] = span_s - out["last_finish_s"]
    out["flag"] = [f"impossible: busy {o:.0%} of the run's span" if o > WHOLE_SPAN else "" for o in out["occupancy"]]
    return out.reset_index()[columns]


WHOLE_SPAN = 1.0 + 1e-6  # a busy share above this is impossible (rounding aside)


def certify_rows(frame: pd.DataFrame) -> pd.Series:
    """Which rows are certifications (tier "certify"); none in a lineage from before the tiers."""
    if "tier" not in frame:
        return pd.Series(False, index=frame.index)
    return frame["tier"].eq("certify").fillna(False).astype(bool)


def paid_setup(frame: pd.DataFrame) -> pd.Series:
    """Each evaluation's setup paid for itself (a GPU child's start, its task's preparation): its
    setup_s less the comparators of any task timed beside candidates and charged to it."""
    own = frame["setup_s"].fillna(0.0)
    if "comparators_s" in frame:
        own = own - frame["comparators_s"].fillna(0.0)
    return own


def token_use(frame: pd.DataFrame, config: Mapping[str, Any]) -> pd.DataFrame:
    """Per task and model: the proposals that used a model, their prompt and completion tokens,
    and the cost in dollars where run.json's `llm` config gives prices per million tokens (a
    negative price means unknown: cost is then left empty). Empty when no model was used."""
    columns = ["task", "model", "proposals", "prompt_tokens", "completion_tokens", "cost_usd"]
    used = frame[frame["prompt_tokens"].notna() | frame["completion_tokens"].notna()]
    if used.empty:
        return pd.DataFrame(columns=columns)
    out = used.groupby(["task", "model"]).agg(
        proposals=("candidate_id", "size"), prompt_tokens=("prompt_tokens", "sum"),
        completion_tokens=("completion_tokens", "sum")).reset_index()
    llm = config.get("llm", {}) if isinstance(config.get("llm"), Mapping) else {}
    price_in, price_out = llm.get("input_price_per_mtok", -1.0), llm.get("output_price_per_mtok", -1.0)
    known = price_in is not None and price_out is not None and price_in >= 0 and price_out >= 0
    out["cost_usd"] = ((out["prompt_tokens"] * price_in + out["completion_tokens"] * price_out) / 1e6
                       if known else None)
    return out[columns]


def driver_time(info: Mapping[str, Any]) -> pd.DataFrame:
    """The search driver's own time, per campaign of the run (a resume is a new campaign), from
    run.json: evaluations, wall seconds, the driver's milliseconds per evaluation, what stopped
    it. Empty for a run still going or killed before its campaign ended."""
    columns = ["campaign", "evaluations", "wall_s", "driver_ms_per_evaluation", "stopped_by"]
    campaigns = [c for c in info.get("campaigns") or [] if isinstance(c, Mapping)]
    rows = [{"campaign": i + 1, **{k: c.get(k) for k in columns[1:]}} for i, c in enumerate(campaigns)]
    return pd.DataFrame(rows, columns=columns)

