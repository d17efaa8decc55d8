"""A run directory read for the report (its lineage and run.json only: finished, running or
killed runs alike, no GPU) and every table of the report computed from it, once."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from fsr import certification, lineage, lineage_schema, run_json
from fsr.report import ceilings, certifications, comparators, costs, kernels, tables

# What the report calls the latency at the measured ceiling, followed by the ceiling's name (the
# copy bandwidth, the SGEMM rate, the 16-bit tensor-core rate: fsr.report.ceilings). Not "device
# ceiling": a kernel that mostly reads can pass the copy rate; a yardstick measured on the device,
# not a physical limit.
ROOFLINE = "roofline"


class ReportError(ValueError):
    """A path that cannot be reported on: not a run directory, no rows, an unreadable file."""


@dataclass(frozen=True)
class Run:
    """One run directory's lineage (evaluations and trials) and run.json."""

    path: Path
    info: dict[str, Any]
    evaluations: pd.DataFrame
    trials: pd.DataFrame

    @property
    def run_id(self) -> str:
        return str(self.info.get("run_id") or self.path.name)

    @property
    def device(self) -> str:
        """The GPU model(s) the run's rows name (a campaign keeps each task on one model)."""
        devices = sorted(set(self.evaluations["device"]) - {""})
        return " + ".join(devices) if devices else "unknown device"

    @property
    def label(self) -> str:
        """The run's id, device and search shape: how a curve of this run is named."""
        config = self.info.get("config", {})
        search = config.get("search", {}) if isinstance(config, dict) else {}
        islands = search.get("islands", "?")
        shape = ("fsr strategy" if self.info.get("strategy") == "fsr"
                 else f"{islands} island{'' if islands == 1 else 's'}")
        return f"{self.run_id} ({self.device}, {shape})"


def load_run(path: str | Path) -> Run:
    """Read a run directory; ReportError (one line) if it is not fsr's or holds no evaluations.
    A damaged run.json costs only what it holds (run id, command, config): a warning, then the
    lineage is reported without it, as it is for a run directory that has none."""
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise ReportError(f"{path}: not a directory")
    has_json, has_rows = (run_dir / "run.json").is_file(), (run_dir / "evaluations").is_dir()
    if not (has_json or has_rows):
        raise ReportError(f"{path}: not an fsr run directory (no run.json or evaluations/)")
    info = _run_info(run_dir) if has_json else {}
    with _held_warnings() as held:
        try:
            evaluations = lineage.read_pandas(run_dir) if has_rows else None
            trials = lineage.read_pandas(run_dir, "trials") if (run_dir / "trials").is_dir() else None
        except (OSError, ValueError, pa.ArrowException) as e:  # Arrow errors are ValueErrors
            raise ReportError(f"{path}: unreadable lineage: {str(e).splitlines()[0]}") from None
    if evaluations is None or evaluations.empty:
        raise ReportError(_why_empty(run_dir, info))
    for record in held:  # parts skipped beside readable rows: worth a warning each
        logging.getLogger(record.name).handle(record)
    if trials is None:
        trials = lineage_schema.TRIALS.empty_table().to_pandas()
    # the comparators timed after a campaign's last evaluation live in run.json, not on a row
    return Run(run_dir, info or {}, comparators.with_recorded(evaluations, info or {}), trials)


@contextlib.contextmanager
def _held_warnings() -> Iterator[list[logging.LogRecord]]:
    """The lineage reader's warnings, held back: for another tool's directory every part is
    "damaged", and the one line that says it is not fsr's is all a user needs."""
    logger, held = logging.getLogger(lineage.__name__), _Held()
    logger.addHandler(held)
    propagate, logger.propagate = logger.propagate, False
    try:
        yield held.records
    finally:
        logger.removeHandler(held)
        logger.propagate = propagate


class _Held(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _run_info(run_dir: Path) -> dict[str, Any] | None:
    """run.json as a dict; None (and a one-line warning) where it is damaged."""
    try:
        return run_json.read_run_json(run_dir)
    except lineage.LineageError as e:
        print(f"fsr: warning: {' '.join(str(e).split())}; reporting the lineage without it", file=sys.stderr)
        return None


def is_fsr_run_json(info: dict[str, Any] | None) -> bool:
    """Whether a run.json is one fsr wrote: `fsr.run_json.write_run_json` always writes a run id
    and a config table; another tool's run.json (or a damaged one) has not both."""
    return isinstance(info, dict) and isinstance(info.get("run_id"), str) and isinstance(info.get("config"), dict)


def _why_empty(run_dir: Path, info: dict[str, Any] | None) -> str:
    """The one line for a run directory with no readable evaluation: fsr's run that has none
    yet, or a directory another tool wrote (a run.json not fsr's, parts none of which is fsr's)."""
    parts = sorted((run_dir / "evaluations").glob("part-*.parquet"))
    if parts:
        return (f"{run_dir}: not an fsr run directory: none of the {len(parts)} part file(s) in evaluations/ "
                "is an fsr lineage part")
    if info is not None and not is_fsr_run_json(info):
        return f"{run_dir}: not an fsr run directory (its run.json has no fsr run_id and config)"
    return f"{run_dir}: the lineage has no evaluations yet"


@dataclass
class RunTables:
    """Every table the report shows for one run."""

    run: Run
    summary: pd.DataFrame
    curves: pd.DataFrame
    verdicts: pd.DataFrame
    effects: pd.DataFrame
    tuning: pd.DataFrame
    stages: pd.DataFrame
    workers: pd.DataFrame
    tokens: pd.DataFrame
    chains: dict[str, pd.DataFrame] = field(default_factory=dict)
    driver: pd.DataFrame = field(default_factory=pd.DataFrame)
    missing: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=comparators.MISSING_COLUMNS))
    certifications: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(certifications.COLUMNS)))

    def references(self, task: str) -> dict[str, float | None]:
        """The task's reference latencies: baseline, library, PyTorch eager, torch.compile, and
        the roofline (the latency the device's measured ceiling allows), named with its ceiling."""
        row = self.summary.set_index("task").loc[task]
        return {"baseline": row["baseline_us"], "library": row["library_us"], "PyTorch eager": row["torch_us"],
                "torch.compile": row["torch_compile_us"], f"{ROOFLINE} ({row['ceiling']})": row["ceiling_us"]}

    @property
    def journal(self) -> Path | None:
        """The Optuna journal of the run's tuning studies, if it kept one."""
        path = self.run.path / "optuna.journal"
        return path if path.is_file() else None


def run_tables(run: Run) -> RunTables:
    """Compute every table of `run`. The winners (the summary, each chain's last step) are the
    rows that count (fsr.certification.counted: where the campaign certified, certified only)."""
    frame = run.evaluations
    counted = certification.counted(frame, certification.certifying(run.info))
    summary = comparators.with_library_names(with_ceilings(tables.task_summary(counted), ceilings.ceilings(frame, run.info)),
                                             run.info)
    summary = with_shortcuts(summary, certifications.shortcut_counts(frame))
    return RunTables(
        run=run, summary=summary, missing=comparators.not_timed(summary, run.info), curves=tables.best_so_far(frame), verdicts=tables.verdict_mix(frame),
        effects=kernels.feature_effects(frame), tuning=kernels.tuning_spread(run.trials, frame),
        stages=costs.stage_times(frame), workers=costs.worker_occupancy(frame),
        tokens=costs.token_use(frame, run.info.get("config", {}) or {}),
        chains={t: kernels.winner_chain(frame, t, counted) for t in summary["task"]},
        driver=costs.driver_time(run.info), certifications=certifications.certification_table(frame))


def with_shortcuts(summary: pd.DataFrame, shortcuts: pd.DataFrame) -> pd.DataFrame:
    """The summary with each task's screenings cut short and answered from an earlier judgement
    (fsr.report.certifications.shortcut_counts): counts, and `screening` in words."""
    out = summary.merge(shortcuts, on="task", how="left")
    for column in ("cut_short", "answered_from"):
        out[column] = out[column].fillna(0).astype(int)
    out["screening"] = out["screening"].fillna("")
    return out


def with_ceilings(summary: pd.DataFrame, bounds: pd.DataFrame) -> pd.DataFrame:
    """The summary with each task's `bound` and `ceiling` (fsr.report.ceilings); a task with no
    timed kernel is named by both ceilings."""
    out = summary.merge(bounds, on="task", how="left")
    out["bound"] = out["bound"].fillna("")
    unnamed = out["ceiling"].isna()
    out.loc[unnamed, "ceiling"] = [ceilings.ceiling_name("", d) for d in out.loc[unnamed, "dtype"]]
    return out


COMPARED = ("task", "dtype", "run", "evaluations", "best_us", "vs_first_run", "speedup_lead", "speedup_torch",
            "speedup_torch_compile", "speedup_library", "ceiling_fraction", "speedup_baseline", "evals_per_gpu_minute")


def comparison(runs: list[RunTables]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Several runs side by side: their task summaries, by task and then in the order the runs
    were given, with `vs_first_run` (this run's best latency over the first run's that has the
    task: 0.5 is twice as fast), and their all-islands best-so-far curves. Each row has a `run`
    column holding the run's label (its device included, so curves from different GPU models
    are never read as one)."""
    summary = pd.concat([r.summary.assign(run=r.run.label, _order=i) for i, r in enumerate(runs)],
                        ignore_index=True).sort_values(["task", "_order"], kind="stable", ignore_index=True)
    timed = summary.dropna(subset=["best_us"]).groupby("task")["best_us"]
    first = timed.first().where(timed.size() > 1)  # a task one run alone timed has no ratio
    summary["vs_first_run"] = pd.to_numeric(summary["best_us"], errors="coerce") / summary["task"].map(first)
    curves = pd.concat([r.curves[r.curves["series"] == "all islands"].assign(run=r.run.label) for r in runs],
                       ignore_index=True)
    return summary[list(COMPARED)], curves


def tasks_in_one_run(curves: pd.DataFrame) -> list[str]:
    """Tasks of a comparison's curves that only one run has a correct kernel for: nothing to
    compare, so they get no comparison plot."""
    runs = curves.groupby("task")["run"].nunique()
    return sorted(str(t) for t in runs[runs < 2].index)


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A table as JSON-ready records: NaN as null, timestamps as ISO text."""
    return json.loads(frame.to_json(orient="records", date_format="iso", default_handler=str))
