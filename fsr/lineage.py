"""The lineage: an append-only crash-safe writer and a reader of the tables fsr.lineage_schema declares.

Layout: runs/<run_id>/run.json, runs/<run_id>/evaluations/part-*.parquet and
runs/<run_id>/trials/part-*.parquet. Every part is a complete Parquet file: it is written under a
hidden temporary name in the same directory, fsynced, then renamed into place, so a run killed at
any instant leaves only whole files where readers look (`part-*.parquet`) and loses at most the
rows still buffered. `read` is the only correct reader: it applies the compaction rule below.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from fsr.files import atomic_write
from fsr.lineage_schema import IDENTITY, MERGED_KEY, SCHEMA_META, SCHEMAS, TIMING_COLUMNS
from fsr.types import (
    Candidate,
    Defines,
    Evaluation,
    LaunchSpec,
    Origin,
    Resources,
    Scratch,
    SizeCheck,
    TensorMap,
    Tier,
    Timing,
    TrialRecord,
    Tunable,
    Verdict,
)

if TYPE_CHECKING:
    import pandas

log = logging.getLogger(__name__)


def new_run_id() -> str:
    """A sortable run id: UTC date and time, then 6 random hex digits (20261122-023000-a1b2c3)."""
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


# ---- candidates as JSON ------------------------------------------------------------------------

LAUNCH_KEYS = ("launches", "tunables", "features", "scratch")


def candidate_to_json(candidate: Candidate) -> str:
    """The whole candidate as JSON; `candidate_from_json` rebuilds an equal one (same `.id`)."""
    return json.dumps(dataclasses.asdict(candidate), sort_keys=True)


def candidate_from_json(text: str) -> Candidate:
    """Inverse of `candidate_to_json`: JSON lists become the record's tuples again."""
    return _candidate(json.loads(text))


def _candidate(d: Mapping[str, Any]) -> Candidate:
    """A Candidate from a dict shaped like `dataclasses.asdict(candidate)` (lists for tuples)."""
    def tunables(xs: list[dict]) -> tuple[Tunable, ...]:
        return tuple(Tunable(x["name"], tuple(x["values"])) for x in xs)
    o = d["origin"]
    return Candidate(
        task=d["task"], source=d["source"],
        launches=tuple(LaunchSpec(x["kernel"], tuple(x["grid"]), tuple(x["block"]), tuple(x["args"]),
                                  x["smem"], x.get("when", ""), tuple(x.get("cluster", ())))
                       for x in d["launches"]),
        tunables=tunables(d["tunables"]), features=tunables(d["features"]),
        scratch=tuple(Scratch(**x) for x in d["scratch"]), defines=_pairs(d["defines"]),
        tensormaps=tuple(_tensormap(x) for x in d.get("tensormaps", ())),
        compile_options=tuple(d["compile_options"]), parents=tuple(d["parents"]), island=d["island"],
        generation=d["generation"],
        origin=Origin(o["proposer"], o["model"], tuple(o["features_requested"]), o["move"]),
        certify=d.get("certify") or "")


def _tensormap(x: Mapping[str, Any]) -> TensorMap:
    """A TensorMap from its `dataclasses.asdict` form (JSON lists become tuples again)."""
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in x.items()}
    return TensorMap(**fields)


def _pairs(value: Iterable[Any]) -> Defines:
    """Defines from JSON ([name, value] lists) or from Parquet ({name, value} structs)."""
    return tuple((p["name"], p["value"]) if isinstance(p, dict) else (p[0], p[1]) for p in value)


def _pair_structs(pairs: Defines) -> list[dict[str, Any]]:
    return [{"name": n, "value": v} for n, v in pairs]


# ---- rows (no I/O) -----------------------------------------------------------------------------

def evaluation_row(candidate: Candidate, evaluation: Evaluation, *, run_id: str = "",
                   features_detected: Iterable[str] = (),
                   started_at: datetime | None = None, finished_at: datetime | None = None,
                   prompt_tokens: int | None = None, completion_tokens: int | None = None,
                   error: str | None = None) -> dict[str, Any]:
    """One `evaluations` row as a dict of column values; raises ValueError if ids disagree."""
    if evaluation.candidate_id != candidate.id:
        raise ValueError(f"evaluation of {evaluation.candidate_id} given with candidate {candidate.id}")
    c, e, o = candidate, evaluation, candidate.origin
    timing = dataclasses.asdict(e.timing) if e.timing else dict.fromkeys(TIMING_COLUMNS)
    plain = dataclasses.asdict(c)
    return {
        "run_id": run_id, "candidate_id": c.id, "task": c.task, "parents": list(c.parents),
        "island": c.island, "generation": c.generation, "proposer": o.proposer, "model": o.model,
        "move": o.move, "features_requested": list(o.features_requested),
        "features_detected": list(features_detected), "source": c.source,
        "defines": _pair_structs(c.defines),
        "launches": _launches_json(plain),
        "compile_options": list(c.compile_options), "verdict": str(e.verdict), "message": e.message,
        "checks": [{"size": _pair_structs(s.size), "passed": s.passed, "max_abs_err": s.max_abs_err,
                    "detail": s.detail} for s in e.checks],
        **timing, "baseline_us": e.baseline_us, "library_us": e.library_us, "speedup": e.speedup,
        **dataclasses.asdict(e.resources), "tuned_defines": _pair_structs(e.tuned_defines),
        "tune_trials": e.tune_trials, "device": e.device, "toolchain": e.toolchain,
        "compile_s": e.compile_s, "verify_s": e.verify_s, "tune_s": e.tune_s,
        "bench_s": e.bench_s, "wall_s": e.wall_s, "worker": e.worker, "started_at": started_at,
        "finished_at": finished_at or datetime.now(UTC), "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens, "error": error, "setup_s": e.setup_s,
        "comparators_s": e.comparators_s,
        "torch_us": e.torch_us, "torch_compile_us": e.torch_compile_us, "torch_compile_s": e.torch_compile_s,
        "diagnostics": e.diagnostics, "dtype": e.dtype or None, "tier": str(e.tier),
        "certified": e.certified, "certifies": c.certify or None, "failed_check": e.failed_check or None,
        "cut_short": e.cut_short, "answered_from": e.answered_from or None,
        "certify_seeds": _pair_structs(e.certify_seeds) if e.tier == Tier.CERTIFY else None,
        "control_us": e.control_us,
    }


def _launches_json(plain: dict[str, Any]) -> str:
    """The header's data of a candidate (`dataclasses.asdict`) as the `launches` column holds it:
    a launch's `when` and `cluster`, and the tensor maps, only where declared, so rows of
    candidates without them read as they always did."""
    data = {k: plain[k] for k in LAUNCH_KEYS}
    data["launches"] = [{k: v for k, v in launch.items() if v or k not in ("when", "cluster")}
                        for launch in data["launches"]]
    if plain["tensormaps"]:
        data["tensormaps"] = plain["tensormaps"]
    return json.dumps(data, sort_keys=True)


def candidate_from_row(row: Mapping[str, Any]) -> Candidate:
    """Rebuild the Candidate of an `evaluations` row (for resume); equal to the one appended."""
    origin = {k: row[k] for k in ("proposer", "model", "features_requested", "move")}
    return _candidate({**row, **json.loads(row["launches"]), "origin": origin, "certify": row.get("certifies")})


def evaluation_from_row(row: Mapping[str, Any]) -> Evaluation:
    """Rebuild the Evaluation of an `evaluations` row (for resume); equal to the one appended."""
    timing = None
    if row["median_us"] is not None:
        timing = Timing(**{k: row[k] for k in TIMING_COLUMNS if k != "samples_us"},
                        samples_us=tuple(row["samples_us"]))
    checks = tuple(SizeCheck(_pairs(s["size"]), s["passed"], s["max_abs_err"], s["detail"])
                   for s in row["checks"])
    resources = Resources(**{f.name: row[f.name] for f in dataclasses.fields(Resources)})
    return Evaluation(candidate_id=row["candidate_id"], task=row["task"], verdict=Verdict(row["verdict"]),
                      message=row["message"], checks=checks, timing=timing, baseline_us=row["baseline_us"],
                      library_us=row["library_us"], resources=resources,
                      tuned_defines=_pairs(row["tuned_defines"]), tune_trials=row["tune_trials"],
                      device=row["device"], toolchain=row["toolchain"], compile_s=row["compile_s"],
                      verify_s=row["verify_s"], tune_s=row["tune_s"], bench_s=row["bench_s"],
                      wall_s=row["wall_s"], setup_s=row.get("setup_s") or 0.0,
                      comparators_s=row.get("comparators_s") or 0.0, torch_us=row.get("torch_us"),
                      torch_compile_us=row.get("torch_compile_us"), torch_compile_s=row.get("torch_compile_s"),
                      diagnostics=row.get("diagnostics") or "", worker=row.get("worker") or "",
                      dtype=row.get("dtype") or "", tier=Tier(row.get("tier") or Tier.SCREEN),
                      certified=row.get("certified"), failed_check=row.get("failed_check") or "",
                      cut_short=bool(row.get("cut_short")), answered_from=row.get("answered_from") or "",
                      certify_seeds=_pairs(row.get("certify_seeds") or ()), control_us=row.get("control_us"))


def trial_row(run_id: str, candidate_id: str, trial: TrialRecord) -> dict[str, Any]:
    """One `trials` row from the tuner's record of a trial."""
    return {"run_id": run_id, "candidate_id": candidate_id, "trial": trial.number,
            "defines": _pair_structs(trial.values), "feasible": trial.feasible, "reason": trial.reason,
            "median_us": trial.latency_us, "cached": trial.cached, "finished_at": datetime.now(UTC)}


# ---- files -------------------------------------------------------------------------------------

def _write_parquet(path: Path, table: pa.Table) -> None:
    atomic_write(path, lambda f: pq.write_table(table, f, compression="zstd"))


class LineageError(ValueError):
    """A run directory whose run.json cannot be read: bad input, reported in one line."""


# What reading a damaged part raises (a missing part is not damage: see `read`).
DAMAGE = (pa.ArrowException, ValueError, TypeError, OSError, UnicodeDecodeError)


def _merged_names(path: Path) -> list[str]:
    """The part names a compacted file says it contains; raises one of DAMAGE if unreadable."""
    names = json.loads((pq.read_schema(path).metadata or {}).get(MERGED_KEY.encode(), b"[]"))
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{MERGED_KEY} is not a list of part names")
    return names


def _skip(path: Path, error: BaseException) -> None:
    log.warning("fsr: lineage part %s is damaged and was skipped (%s: %s); every other row is kept",
                path, type(error).__name__, str(error).splitlines()[0] if str(error) else "")


def _scan(directory: Path) -> tuple[list[Path], set[str]]:
    """Part files not yet contained in a compacted file, and the names of those that are. A
    part whose footer cannot be read is left out, with a warning."""
    files = sorted(directory.glob("part-*.parquet"))
    merged: set[str] = set()
    readable = []
    for f in files:
        try:
            merged.update(_merged_names(f))
            readable.append(f)
        except FileNotFoundError:
            raise
        except DAMAGE as e:
            _skip(f, e)
    return [f for f in readable if f.name not in merged], merged


def _read_parts(files: list[Path], schema: pa.Schema) -> list[tuple[Path, pa.Table]]:
    """Each readable part conformed to `schema`; a damaged one is skipped with a warning."""
    parts = []
    for f in files:
        try:
            parts.append((f, _conform(pq.read_table(f), schema)))
        except FileNotFoundError:
            raise
        except DAMAGE as e:
            _skip(f, e)
    return parts


def _conform(part: pa.Table, schema: pa.Schema) -> pa.Table:
    """A part's columns in the schema's order and types; nullable columns the part predates
    (added to the schema since it was written) come back as nulls."""
    missing = [f for f in schema if f.name not in part.column_names]
    for f in missing:
        if not f.nullable:
            raise ValueError(f"lineage part lacks required column {f.name!r}")
        part = part.append_column(f, pa.nulls(part.num_rows, f.type))
    return part.select(schema.names).cast(schema)


def read(run_dir: str | Path, table: str = "evaluations") -> pa.Table:
    """All committed rows of one table, each once (also when a part file is present twice:
    IDENTITY); an empty table with the schema if none."""
    schema = SCHEMAS[table]
    for attempt in range(3):
        try:
            live, _ = _scan(Path(run_dir) / table)
            parts = [t for _, t in _read_parts(live, schema)]
            break
        except FileNotFoundError:  # a concurrent compaction merged a part we had listed: rescan
            if attempt == 2:
                raise
    return _once(pa.concat_tables(parts), table, Path(run_dir) / table) if parts else schema.empty_table()


def _once(rows: pa.Table, table: str, where: Path) -> pa.Table:
    """`rows` with each evaluation (trial) once, in their order; a warning says how many rows
    were dropped. One evaluation counted twice would double a run's throughput and skew every
    figure of the report."""
    keys = list(IDENTITY[table])
    if rows.num_rows < 2:
        return rows
    indexed = rows.select(keys).append_column("_row", pa.array(range(rows.num_rows), pa.int64()))
    first = indexed.group_by(keys, use_threads=False).aggregate([("_row", "min")])["_row_min"]
    dropped = rows.num_rows - len(first)
    if not dropped:
        return rows
    log.warning("fsr: lineage %s: %d row(s) present twice were dropped (a part file copied, or run "
                "directories merged?); each %s counts once", where, dropped, table[:-1])
    return rows.take(first.sort())


def read_pandas(run_dir: str | Path, table: str = "evaluations") -> pandas.DataFrame:
    """`read` as a pandas DataFrame (pandas is imported only here)."""
    import pandas  # noqa: F401  (fail here, clearly, if pandas is missing)
    return read(run_dir, table).to_pandas()


def compact(run_dir: str | Path, table: str) -> None:
    """Merge a table's parts into one file, crash-safely.

    Why a manifest rather than deduplicating by key: the merged file lists, in its Parquet
    key-value metadata, the part names it contains, and `read` skips those parts. That is exact
    whatever the rows hold (a candidate legitimately evaluated twice, e.g. after a resume, is
    not collapsed) and costs only a footer read per file. A kill between the rename and the
    deletions leaves parts that are ignored, then deleted by the next compaction. Part names
    are unique (time, pid, sequence), so a name, once deleted, never comes back: the manifest
    lists only files that exist now, and stays short. One compactor per run at a time.
    Temporary files left by killed writers are removed once they are an hour old (a live
    writer's exists for milliseconds).
    """
    directory = Path(run_dir) / table
    for tmp in directory.glob(".tmp-*"):
        with contextlib.suppress(FileNotFoundError):  # renamed into place since the glob
            if time.time() - tmp.stat().st_mtime > 3600:
                tmp.unlink()
    live, merged = _scan(directory)
    stale = [directory / n for n in sorted(merged) if (directory / n).exists()]
    good = _read_parts(live, SCHEMAS[table]) if len(live) > 1 else []  # damaged parts stay as they are
    if len(good) > 1:
        meta = {**SCHEMA_META, MERGED_KEY: json.dumps([f.name for f in stale] + [f.name for f, _ in good]).encode()}
        rows = _once(pa.concat_tables([t for _, t in good]), table, directory)
        target = directory / f"{good[-1][0].stem}-m{uuid.uuid4().hex[:6]}.parquet"  # sorts after its rows
        _write_parquet(target, rows.replace_schema_metadata(meta))
        stale += [f for f, _ in good]
    for f in stale:
        f.unlink(missing_ok=True)


class LineageWriter:
    """Buffers rows and commits them as small whole Parquet parts.

    A table's buffer is flushed when it holds `batch_rows` rows or its oldest row is
    `batch_age_s` old, checked at each append (call `flush` to commit a quiet buffer).
    Thread-safe; `close` flushes and compacts.
    """

    def __init__(self, run_dir: str | Path, batch_rows: int = 16, batch_age_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.run_dir = Path(run_dir)
        self.run_id = self.run_dir.name
        self.batch_rows, self.batch_age_s, self._clock = batch_rows, batch_age_s, clock
        self._rows: dict[str, list[dict[str, Any]]] = {t: [] for t in SCHEMAS}
        self._since: dict[str, float] = {}
        self._seq = 0
        self._lock = threading.Lock()
        self._closed = False
        for t in SCHEMAS:
            (self.run_dir / t).mkdir(parents=True, exist_ok=True)

    def append(self, candidate: Candidate, evaluation: Evaluation, **extra: Any) -> None:
        """Buffer one evaluation (extra: features_detected, started_at, finished_at,
        prompt_tokens, completion_tokens, error) and the tuning trials it carries, if any;
        commits a batch when one is due."""
        row = evaluation_row(candidate, evaluation, run_id=self.run_id, **extra)
        trials = [trial_row(self.run_id, candidate.id, t) for t in evaluation.trials]
        self._add(evaluations=[row], trials=trials)

    def append_trials(self, candidate_id: str, trials: Iterable[TrialRecord]) -> None:
        """Buffer tuning trials known apart from an Evaluation; `append` already writes an
        Evaluation's own trials."""
        self._add(trials=[trial_row(self.run_id, candidate_id, t) for t in trials])

    def flush(self) -> None:
        """Commit every buffered row now."""
        with self._lock:
            for table in SCHEMAS:
                self._commit(table)

    def close(self) -> None:
        """Flush, then compact each table into one file. Idempotent."""
        if self._closed:
            return
        self.flush()
        self._closed = True
        for table in SCHEMAS:
            compact(self.run_dir, table)

    def __enter__(self) -> LineageWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _add(self, **rows_by_table: list[dict[str, Any]]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("lineage writer is closed")
            now = self._clock()
            for table, rows in rows_by_table.items():
                if rows:
                    self._since.setdefault(table, now)
                    self._rows[table].extend(rows)
            for table, buffered in self._rows.items():
                if buffered and (len(buffered) >= self.batch_rows
                                 or now - self._since[table] >= self.batch_age_s):
                    self._commit(table)

    def _commit(self, table: str) -> None:
        rows = self._rows[table]
        if not rows:
            return
        self._seq += 1
        name = f"part-{time.time_ns():020d}-{os.getpid()}-{self._seq:06d}.parquet"
        _write_parquet(self.run_dir / table / name, pa.Table.from_pylist(rows, schema=SCHEMAS[table]))
        self._rows[table] = []
        self._since.pop(table, None)
