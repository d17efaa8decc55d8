"""Hand-built lineages for report tests: rows with every column of the evaluations schema, as the
DataFrame `fsr.lineage.read_pandas` gives, and a synthetic campaign written as a run directory."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from fsr import lineage_schema

T0 = datetime(2026, 11, 23, 6, 0, tzinfo=UTC)


def row(**values: Any) -> dict[str, Any]:
    """One evaluations row: a correct, timed softmax kernel on gpu0, overridden by `values`."""
    base: dict[str, Any] = {
        "run_id": "r", "candidate_id": "c0", "task": "softmax", "parents": [], "island": 0,
        "generation": 0, "proposer": "mutate", "model": "", "move": "seed", "features_requested": [],
        "features_detected": [], "source": "__global__ void k() {}\n", "defines": [], "launches": "{}",
        "compile_options": [], "verdict": "OK", "message": "", "checks": [], "median_us": 10.0,
        "p10_us": None, "p90_us": None, "min_us": None, "samples_us": None, "gbps": None, "tflops": None,
        "ceiling_fraction": 0.5, "baseline_us": 40.0, "library_us": 20.0, "speedup": None,
        "registers": 32, "spill_bytes": 0, "smem_static_bytes": 0, "stack_bytes": 0, "tuned_defines": [],
        "tune_trials": 0, "device": "NVIDIA H200", "toolchain": "", "compile_s": 0.1, "verify_s": 0.2,
        "tune_s": 0.0, "bench_s": 0.3, "wall_s": 1.0, "worker": "gpu0", "started_at": T0,
        "finished_at": T0 + timedelta(seconds=1), "prompt_tokens": None, "completion_tokens": None,
        "error": None, "setup_s": 0.0, "comparators_s": 0.0, "torch_us": 15.0, "torch_compile_us": None,
        "torch_compile_s": None, "dtype": None, "tier": "screen", "certified": None, "certifies": None,
        "failed_check": None, "cut_short": False, "answered_from": None, "control_us": None,
    }
    unknown = set(values) - set(base)
    if unknown:
        raise KeyError(f"not an evaluations column: {sorted(unknown)}")
    return {**base, **values}


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows through the lineage schema, so column types are those of a real lineage."""
    return pa.Table.from_pylist(rows, schema=lineage_schema.EVALUATIONS).to_pandas()


def write_run(run_dir: Path, rows: list[dict[str, Any]], extra: dict[str, Any] | None = None,
              trials: list[dict[str, Any]] | None = None) -> Path:
    """A run directory holding `rows` (and `trials`) as one part each and a run.json."""
    for table, items, schema in (("evaluations", rows, lineage_schema.EVALUATIONS), ("trials", trials, lineage_schema.TRIALS)):
        if items is not None:
            (run_dir / table).mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pylist(items, schema=schema), run_dir / table / "part-0.parquet")
    doc = {"run_id": run_dir.name, "command": "fsr run softmax", "tasks": sorted({r["task"] for r in rows}),
           "config": {}, **(extra or {})}
    (run_dir / "run.json").write_text(json.dumps(doc))
    return run_dir


def synthetic_rows(evaluations: int, tasks: int = 3, islands: int = 8, seed: int = 0) -> list[dict[str, Any]]:
    """A campaign's worth of rows: latencies that improve over time with noise, mixed verdicts,
    two workers, each kernel a child of an earlier one of its task."""
    rng = np.random.default_rng(seed)
    verdicts = rng.choice(["OK", "OK", "OK", "WRONG", "COMPILE_ERROR", "TIMEOUT"], size=evaluations)
    out = []
    for i in range(evaluations):
        task, island = f"task{i % tasks}", int(rng.integers(islands))
        ok = verdicts[i] == "OK"
        median = float(100.0 * (1 + rng.random()) / (1 + i / 2000)) if ok else None
        parent = [f"c{i - tasks * int(rng.integers(1, 4))}"] if i >= 4 * tasks else []
        out.append(row(
            candidate_id=f"c{i}", task=task, island=island, generation=i // 100, parents=parent,
            move="mutate", features_requested=["vec4"] if i % 2 else ["unroll"],
            features_detected=["vec4", "shuffle"] if i % 2 else ["unroll"],
            source=f"__global__ void k() {{ /* {i} */ }}\n", verdict=str(verdicts[i]), median_us=median,
            samples_us=[median] * 50 if median else None, ceiling_fraction=0.3 if ok else None,
            worker=f"gpu{i % 2}", started_at=T0 + timedelta(seconds=0.5 * i),
            finished_at=T0 + timedelta(seconds=0.5 * i + 1.0)))
    return out


def synthetic_trials(rows: list[dict[str, Any]], per_candidate: int = 8, seed: int = 0) -> list[dict[str, Any]]:
    """Tuning trials of every correct row: BLOCK and UNROLL values, latencies around its own."""
    rng = np.random.default_rng(seed)
    out = []
    for r in rows:
        if r["verdict"] != "OK":
            continue
        for n in range(per_candidate):
            block, unroll = int(rng.choice([64, 128, 256, 512])), int(rng.choice([1, 2, 4]))
            out.append({"run_id": "r", "candidate_id": r["candidate_id"], "trial": n,
                        "defines": [{"name": "BLOCK", "value": block}, {"name": "UNROLL", "value": unroll}],
                        "feasible": True, "reason": "", "median_us": r["median_us"] * (1 + 256 / block / 10),
                        "cached": False, "finished_at": r["finished_at"]})
    return out


def small_run(run_dir: Path, device: str = "NVIDIA H200", slower: float = 1.0) -> Path:
    """Two tasks, six kernels each on two islands (each 10 us faster than the last), one wrong."""
    rows = [row(candidate_id=f"{task}{i}", task=task, island=i % 2, median_us=(100.0 - 10 * i) * slower,
                device=device, parents=[f"{task}{i - 2}"] if i >= 2 else [], started_at=T0 + timedelta(seconds=i),
                finished_at=T0 + timedelta(seconds=i + 1), features_detected=["VEC4"] if i % 2 else [])
            for i in range(6) for task in ("softmax", "sgemm")]
    rows.append(row(candidate_id="w", verdict="WRONG", median_us=None, device=device))
    return write_run(run_dir, rows, {"config": {"search": {"islands": 2}}}, trials=synthetic_trials(rows))
