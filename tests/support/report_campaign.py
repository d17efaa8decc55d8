"""A realistic synthetic bench campaign for report tests and the README's screenshots: six tasks
with the latencies a real H200 run showed (a library far slower than the kernels on gelu, the
kernel, PyTorch eager and the roofline within 2% of each other there), torch.compile (failed on
histogram), each kernel's rates, spread, registers and spills, four islands, mixed verdicts, tuning trials with an all-infeasible value; and a one-island run of some of the tasks
(plus one of its own) to compare it with.

    python -m tests.support.report_campaign OUT    # writes OUT/islands4 and OUT/islands1
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.lineage_rows import T0, row, write_run

# task: baseline, library (None: none), PyTorch eager, roofline, best kernel (us)
TASKS: dict[str, tuple[float, float | None, float, float, float]] = {
    "gelu": (260.3, 2880.4, 176.1, 178.0, 174.2),
    "histogram": (1504.0, None, 812.5, 120.2, 140.6),
    "layernorm": (5474.1, 2070.5, 220.1, 128.0, 236.2),
    "scan": (902.7, 310.4, 421.9, 250.3, 289.8),
    "sgemm": (25375.8, 2679.6, 2678.9, 2717.1, 6384.4),
    "softmax": (4825.0, 1210.3, 310.8, 128.0, 169.0),
    "transpose": (820.0, 402.0, 395.5, 380.1, 384.9),
}
# torch.compile (us; None: it failed on the task, so the report says it was not timed), and each
# task's FLOPs per byte: an H200's measured copy rate and SGEMM rate then give each kernel's GB/s,
# TFLOP/s and which ceiling binds (sgemm's arithmetic, the others' bytes).
TORCH_COMPILE: dict[str, float | None] = {"gelu": 171.9, "histogram": None, "layernorm": 160.4, "scan": 402.8,
                                          "sgemm": 2701.3, "softmax": 205.7, "transpose": 390.2}
FLOPS_PER_BYTE = {"gelu": 2.0, "histogram": 0.5, "layernorm": 2.5, "scan": 0.5, "sgemm": 1365.0, "softmax": 2.5,
                  "transpose": 0.0}
COPY_GBPS, SGEMM_TFLOPS = 3900.0, 51.0
FEATURES = ("VEC4", "UNROLL", "SMEM_TILE", "WARP_SHUFFLE", "LAUNCH_BOUNDS", "READONLY")
VERDICTS = ("OK", "OK", "OK", "OK", "OK", "OK", "COMPILE_ERROR", "WRONG", "TIMEOUT")


def _latency(rng: np.random.Generator, figures: tuple[float, ...], progress: float) -> float:
    """A proposal's latency: from near the baseline towards the best as the search goes on."""
    baseline, best = figures[0], figures[4]
    return best * (baseline / best) ** ((1 - progress) ** 2.5) * (1 + 0.25 * rng.random())


def rates(task: str, fraction: float) -> dict[str, float]:
    """A kernel's GB/s and TFLOP/s at `fraction` of its task's roofline, as the judge records them."""
    intensity = FLOPS_PER_BYTE[task]
    if intensity * COPY_GBPS / 1000 < SGEMM_TFLOPS:  # the bytes bind
        gbps = fraction * COPY_GBPS
        return {"gbps": gbps, "tflops": gbps * intensity / 1000}
    tflops = fraction * SGEMM_TFLOPS
    return {"gbps": tflops * 1000 / intensity, "tflops": tflops}


def campaign_rows(tasks: list[str], islands: int, per_task: int = 40, seed: int = 0,
                  slower: float = 1.0) -> list[dict[str, Any]]:
    """`per_task` evaluations of each task, interleaved as a campaign runs them on two workers;
    each task's last correct kernel is its best (its TASKS figure times `slower`)."""
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    clock = 0.0
    parent: dict[str, str] = {}  # each task's best correct kernel so far: the next one's parent
    best_us: dict[str, float] = {}
    for i in range(per_task):
        for task in tasks:
            baseline, library, torch, roofline, best = TASKS[task]
            only_ok = task == "gelu"  # one task with a single verdict: its chart still has a legend
            verdict = "OK" if only_ok or i == per_task - 1 else str(rng.choice(VERDICTS))
            ok = verdict == "OK"
            median = (best if i == per_task - 1 else _latency(rng, TASKS[task], i / per_task)) * slower if ok else None
            feats = [f for f in FEATURES if rng.random() < 0.3 + 0.4 * i / per_task]
            wall = float(0.6 + rng.random() * 1.5 + (2.0 if ok else 0.0))
            setup = 8.0 if i == 0 else 0.0
            n = len(out)
            out.append(row(
                candidate_id=f"{task}-{i}", task=task, island=i % islands, generation=i // islands,
                parents=[parent[task]] if task in parent else [], move="seed" if i == 0 else "toggle",
                features_detected=feats, source=f"__global__ void k() {{ /* {task} {i} */ }}\n",
                defines=[{"name": f, "value": 1} for f in feats], verdict=verdict, median_us=median,
                samples_us=[median] * 20 if median else None, p10_us=0.97 * median if median else None,
                p90_us=1.04 * median if median else None, **(rates(task, roofline / median) if median else {}),
                registers=(28, 32, 40, 64)[i % 4], spill_bytes=16 if i % 7 == 3 else 0,
                ceiling_fraction=roofline / median if median else None, baseline_us=baseline, library_us=library,
                torch_us=torch, torch_compile_us=TORCH_COMPILE[task], tuned_defines=[{"name": "BLOCK", "value": int(rng.choice([128, 256, 512]))},
                                               {"name": "UNROLL", "value": int(rng.choice([1, 2, 4]))}] if ok else [],
                compile_s=0.3 + rng.random(), verify_s=0.05 + 0.1 * rng.random(), tune_s=1.5 * rng.random() if ok else 0.0,
                bench_s=0.2 + 0.2 * rng.random() if ok else 0.0, setup_s=setup, wall_s=wall + setup,
                worker=f"gpu{n % 2}", started_at=T0 + timedelta(seconds=clock),
                finished_at=T0 + timedelta(seconds=clock + wall + setup)))
            if median is not None and median < best_us.get(task, float("inf")):
                parent[task], best_us[task] = f"{task}-{i}", median
            clock += wall / 2 + (setup if n < 2 else 0.0)
    return out


def campaign_trials(rows: list[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """Six trials of each correct row: BLOCK values (1024 always too large: infeasible) and
    UNROLL values, a few percent apart, so the tuning chart has differences to show."""
    rng = np.random.default_rng(seed)
    out = []
    for r in rows:
        if r["verdict"] != "OK":
            continue
        for n in range(6):
            block, unroll = int(rng.choice([128, 256, 512, 1024])), int(rng.choice([1, 2, 4]))
            feasible = block < 1024
            out.append({"run_id": r["run_id"], "candidate_id": r["candidate_id"], "trial": n,
                        "defines": [{"name": "BLOCK", "value": block}, {"name": "UNROLL", "value": unroll}],
                        "feasible": feasible, "reason": "" if feasible else "too many threads",
                        "median_us": r["median_us"] * (1 + 0.04 * abs(block - 256) / 128 + 0.02 * (unroll == 1))
                        if feasible else None, "cached": False, "finished_at": r["finished_at"]})
    return out


def write_campaign(run_dir: Path, tasks: list[str], islands: int, slower: float = 1.0, seed: int = 0) -> Path:
    """The campaign as a run directory, with a run.json as `fsr bench` writes one."""
    rows = campaign_rows(tasks, islands, seed=seed, slower=slower)
    command = ["fsr", "bench", *tasks, "--max-evaluations", "40", "--seed", str(seed)]
    return write_run(run_dir, rows, {"config": {"search": {"islands": islands}}, "command": command,
                                     "created_at": T0.isoformat()}, trials=campaign_trials(rows, seed))


def write_pair(out: Path) -> tuple[Path, Path]:
    """The four-island campaign of every task, and a one-island one of four of them and a task
    the first lacks (so the comparison has tasks that only one run timed)."""
    a = write_campaign(out / "islands4", sorted(set(TASKS) - {"transpose"}), islands=4)
    b = write_campaign(out / "islands1", ["gelu", "layernorm", "sgemm", "softmax", "transpose"], islands=1,
                       slower=1.08, seed=1)
    return a, b


if __name__ == "__main__":
    for path in write_pair(Path(sys.argv[1])):
        print(path)
