"""The algorithm tasks on one GPU: each task's baseline, template default and a few strong
switch combinations of its template, evaluated without tuning; prints median, fraction of the
measured ceiling, speedup over the baseline and over the library and PyTorch eager, and writes
the rows as JSON.

    python3 bench/algo_tasks.py [--out rows.json] [TASK ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from fsr import candidate, tasks
from fsr.config import Config, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Verdict, WorkerSpec

ON = 1
VARIANTS: dict[str, list[dict[str, int]]] = {
    "scan": [
        dict(VEC4=ON, WARP_SHUFFLE=ON, LOOKBACK_WARP=ON, READONLY=ON, LAUNCH_BOUNDS=ON, BLOCK=256, ITEMS=16),
        dict(VEC4=ON, SMEM_TILE=ON, WARP_SHUFFLE=ON, LOOKBACK_WARP=ON, READONLY=ON, BLOCK=256, ITEMS=8),
        dict(VEC4=ON, SMEM_TILE=ON, WARP_SHUFFLE=ON, LOOKBACK_WARP=ON, READONLY=ON, BLOCK=256, ITEMS=8,
             BACKOFF_NS=512),
        dict(VEC4=ON, SMEM_TILE=ON, WARP_SHUFFLE=ON, LOOKBACK_WARP=ON, READONLY=ON, BLOCK=512, ITEMS=16),
        dict(VEC4=ON, SMEM_TILE=ON, WARP_SHUFFLE=ON, READONLY=ON, BLOCK=256, ITEMS=16, BACKOFF_NS=32),
        dict(VEC4=ON, SMEM_TILE=ON, WARP_SHUFFLE=ON, LOOKBACK_WARP=ON, READONLY=ON, IN_ORDER=ON, BLOCK=256, ITEMS=8),
        dict(VEC4=ON, SMEM_TILE=ON, WARP_SHUFFLE=ON, LOOKBACK_WARP=ON, READONLY=ON, IN_ORDER=ON, BLOCK=512, ITEMS=16),
        dict(VEC4=ON, WARP_SHUFFLE=ON, LOOKBACK_WARP=ON, READONLY=ON, IN_ORDER=ON, BLOCK=256, ITEMS=16,
             BACKOFF_NS=32),
    ],
    "histogram": [
        dict(PRIVATE=ON, VEC4=ON, READONLY=ON, UNROLL=ON, LAUNCH_BOUNDS=ON, BLOCK=512, GRID=528, COPIES=4),
        dict(PRIVATE=ON, VEC4=ON, READONLY=ON, UNROLL=ON, BLOCK=1024, GRID=264, COPIES=8),
        dict(PRIVATE=ON, VEC4=ON, READONLY=ON, UNROLL=ON, BLOCK=256, GRID=1056, COPIES=2, UNROLL_BY=8),
    ],
    "jacobi2d": [
        dict(VEC4=ON, ROLLING=ON, READONLY=ON, BY=4, ROWS=8),
        dict(VEC4=ON, ROLLING=ON, READONLY=ON, STREAM=ON, BY=4, ROWS=8),
        dict(VEC4=ON, WARP_SHUFFLE=ON, ROLLING=ON, READONLY=ON, STREAM=ON, LAUNCH_BOUNDS=ON, BY=8, ROWS=8),
        dict(VEC4=ON, SMEM_TILE=ON, READONLY=ON, STREAM=ON, BY=8, ROWS=8),
    ],
    "nbody": [
        dict(SMEM_TILE=ON, VEC4=ON, WARP_SHUFFLE=ON, FAST_MATH=ON, READONLY=ON, UNROLL=ON, LAUNCH_BOUNDS=ON,
             BLOCK=128, SPLIT=4, TPT=2),
        dict(SMEM_TILE=ON, VEC4=ON, WARP_SHUFFLE=ON, FAST_MATH=ON, READONLY=ON, UNROLL=ON, LAUNCH_BOUNDS=ON,
             BLOCK=128, SPLIT=8, TPT=2),
        dict(SMEM_TILE=ON, VEC4=ON, WARP_SHUFFLE=ON, FAST_MATH=ON, READONLY=ON, UNROLL=ON, LAUNCH_BOUNDS=ON,
             BLOCK=256, SPLIT=16, TPT=2),
        dict(SMEM_TILE=ON, VEC4=ON, WARP_SHUFFLE=ON, FAST_MATH=ON, READONLY=ON, UNROLL=ON, LAUNCH_BOUNDS=ON,
             BLOCK=256, SPLIT=8, TPT=4),
        dict(SMEM_TILE=ON, VEC4=ON, WARP_SHUFFLE=ON, FAST_MATH=ON, READONLY=ON, UNROLL=ON, LAUNCH_BOUNDS=ON,
             BLOCK=128, SPLIT=32, TPT=1),
    ],
    "spmv_csr": [
        dict(WARP_SHUFFLE=ON, READONLY=ON, BLOCK=256, TPR=32),
        dict(WARP_SHUFFLE=ON, VEC4=ON, READONLY=ON, STREAM=ON, UNROLL=ON, LAUNCH_BOUNDS=ON, BLOCK=256, TPR=32),
        dict(WARP_SHUFFLE=ON, VEC4=ON, READONLY=ON, BLOCK=256, TPR=16),
        dict(WARP_SHUFFLE=ON, READONLY=ON, STREAM=ON, BLOCK=512, TPR=16),
        dict(WARP_SHUFFLE=ON, READONLY=ON, UNROLL=ON, BLOCK=256, TPR=8),
    ],
    "maxpool2d": [
        dict(STREAM=ON),
        dict(READONLY=ON, LAUNCH_BOUNDS=ON, BY=8, ROWS=1),
        dict(ROW_REUSE=ON, BY=4, ROWS=4),
        dict(VEC4=ON, STREAM=ON, BY=8, ROWS=2),
        dict(WARP_SHUFFLE=ON, STREAM=ON, BY=2, ROWS=2),
    ],
}


def row(task_name: str, label: str, ev) -> dict:
    t = ev.timing
    out = {"task": task_name, "variant": label, "verdict": str(ev.verdict), "message": ev.message[:300]}
    if t is not None and ev.verdict == Verdict.OK:
        out |= {"median_us": t.median_us, "ceiling": t.ceiling_fraction, "gbps": t.gbps, "tflops": t.tflops,
                "baseline_us": ev.baseline_us, "library_us": ev.library_us, "torch_us": ev.torch_us,
                "speedup": ev.speedup, "vs_library": (ev.library_us or 0) / t.median_us,
                "vs_torch": (ev.torch_us or 0) / t.median_us, "registers": ev.resources.registers}
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("tasks", nargs="*", default=list(VARIANTS))
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    evaluator = GpuEvaluator(WorkerSpec.of(Config(tune=TuneConfig(trials=0)), [tasks.load(n) for n in args.tasks]))
    rows = []
    print(f"device: {evaluator.device().name}", flush=True)
    for name in args.tasks:
        task = tasks.load(name)
        template = candidate.parse(task.template_source, task)
        cases = [("default", {})] + [(f"v{i}", d) for i, d in enumerate(VARIANTS.get(name, []))]
        for label, defines in cases:
            started = time.perf_counter()
            try:
                ev = evaluator.evaluate(candidate.with_defines(template, defines), tune=False)
                r = row(name, label, ev)
            except RuntimeError as e:  # the baseline is not OK: the task cannot be timed
                r = {"task": name, "variant": label, "verdict": "BASELINE_FAILED", "message": str(e)[:500]}
            r["wall_s"] = round(time.perf_counter() - started, 2)
            rows.append(r)
            print(json.dumps(r), flush=True)
            if r["verdict"] == "BASELINE_FAILED":
                break
    evaluator.close()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
