"""A run directory read for the report (its lineage and run.json only: finished, running or
killed runs alike, no GPU) and every table of the report computed from it, once."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from fsr import lineage
from fsr.report import costs, kernels, tables


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
    """Read a run directory; ReportError (one line) if it is not one or holds no evaluations."""
    run_dir = Path(path)
    if not run_dir.is_dir() or not ((run_dir / "run.json").is_file() or (run_dir / "evaluations").is_dir()):
        raise ReportError(f"{path}: not a run directory (no run.json or evaluations/)")
    try:
        info = lineage.read_run_json(run_dir) if (run_dir / "run.json").is_file() else {}
        evaluations = lineage.read_pandas(run_dir) if (run_dir / "evaluations").is_dir() else None
        trials = lineage.read_pandas(run_dir, "trials") if (run_dir / "trials").is_dir() else None
    except (OSError, ValueError, pa.ArrowException) as e:  # json and Arrow errors are ValueErrors
        raise ReportError(f"{path}: unreadable lineage: {str(e).splitlines()[0]}") from None
    if evaluations is None or evaluations.empty:
        raise ReportError(f"{path}: the lineage has no evaluations yet")
    if trials is None:
        trials = lineage.TRIALS.empty_table().to_pandas()
    return Run(run_dir, info if isinstance(info, dict) else {}, evaluations, trials)


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

    def references(self, task: str) -> dict[str, float | None]:
        """The task's reference latencies: baseline, library, PyTorch eager, device ceiling."""
        row = self.summary.set_index("task").loc[task]
        return {"baseline": row["baseline_us"], "library": row["library_us"], "PyTorch eager": row["torch_us"],
                "device ceiling": row["ceiling_us"]}

    @property
    def journal(self) -> Path | None:
        """The Optuna journal of the run's tuning studies, if it kept one."""
        path = self.run.path / "optuna.journal"
        return path if path.is_file() else None


def run_tables(run: Run) -> RunTables:
    """Compute every table of `run`."""
    frame = run.evaluations
    summary = tables.task_summary(frame)
    return RunTables(
        run=run, summary=summary, curves=tables.best_so_far(frame), verdicts=tables.verdict_mix(frame),
        effects=kernels.feature_effects(frame), tuning=kernels.tuning_spread(run.trials, frame),
        stages=costs.stage_times(frame), workers=costs.worker_occupancy(frame),
        tokens=costs.token_use(frame, run.info.get("config", {}) or {}),
        chains={t: kernels.winner_chain(frame, t) for t in summary["task"]},
        driver=costs.driver_time(run.info))


def comparison(runs: list[RunTables]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Several runs side by side: their task summaries and their all-islands best-so-far curves,
    each row with a `run` column holding the run's label (its device included, so curves from
    different GPU models are never read as one)."""
    summary = pd.concat([r.summary.assign(run=r.run.label) for r in runs], ignore_index=True)
    curves = pd.concat([r.curves[r.curves["series"] == "all islands"].assign(run=r.run.label) for r in runs],
                       ignore_index=True)
    return summary[["run", *summary.columns.drop("run")]], curves


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A table as JSON-ready records: NaN as null, timestamps as ISO text."""
    return json.loads(frame.to_json(orient="records", date_format="iso", default_handler=str))
