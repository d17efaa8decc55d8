"""Candidates and evaluations with every field set, written to a run's lineage: for the tests
of the lineage and of damaged lineages."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fsr import lineage
from fsr.types import (
    Candidate,
    Evaluation,
    LaunchSpec,
    Origin,
    Resources,
    Scratch,
    SizeCheck,
    Timing,
    Tunable,
    Verdict,
)


def make_candidate(i: int = 0) -> Candidate:
    return Candidate(
        task="softmax", source=f"/* fsr ... */\n__global__ void k{i}(float* x) {{}}\n",
        launches=(LaunchSpec("k", ("rows", "1"), ("BLOCK",), ("x", "y", "rows"), smem="BLOCK * 4"),
                  LaunchSpec("k2", ("1",), ("32",), ("partial", "y"))),
        tunables=(Tunable("BLOCK", (256, 128, 512)), Tunable("ITEMS", (1, 2, 4))),
        features=(Tunable("VEC4", (0, 1)),),
        scratch=(Scratch("partial", "float32", "rows * 4", zero=True),),
        defines=(("BLOCK", 128), ("VEC4", 1)), compile_options=("-O3", "--use_fast_math"),
        parents=("aaaa", "bbbb"), island=2, generation=7,
        origin=Origin("llm", "gpt-4.1", ("vectorised_loads", "warp_shuffle"), "crossover"))


def ok_evaluation(c: Candidate) -> Evaluation:
    return Evaluation(
        candidate_id=c.id, task=c.task, verdict=Verdict.OK, message="ptxas info",
        checks=(SizeCheck((("rows", 7), ("cols", 33)), True, 1e-7), SizeCheck((("rows", 1),), True)),
        timing=Timing(10.5, 10.1, 11.2, 9.9, (10.5, 10.1, 11.2, 9.9), 812.5, 0.02, 0.31),
        baseline_us=21.0, library_us=12.0, resources=Resources(40, 8, 1024, 16),
        tuned_defines=(("BLOCK", 512), ("ITEMS", 2)), tune_trials=24, device="NVIDIA H100",
        toolchain="nvrtc 13.0", compile_s=0.4, wall_s=3.2, setup_s=1.7)


def failed_evaluation(c: Candidate) -> Evaluation:
    return Evaluation(candidate_id=c.id, task=c.task, verdict=Verdict.COMPILE_ERROR,
                      message="error: expected ';'")


def write_rows(run_dir: Path, n: int, batch_rows: int = 4) -> None:
    w = lineage.LineageWriter(run_dir, batch_rows=batch_rows, batch_age_s=1e9)
    for i in range(n):
        c = make_candidate(i)
        w.append(c, replace(ok_evaluation(c), worker=f"gpu{i % 2}"))
    w.flush()


def parts(run_dir: Path, table: str = "evaluations") -> list[Path]:
    return sorted((run_dir / table).glob("part-*.parquet"))
