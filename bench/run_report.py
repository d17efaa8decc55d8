"""Summary of a search run from its lineage, for BENCHMARKS.md: per task the best kernel's
latency, its fraction of the device ceiling, its speedup over the baseline, over the library and
(with --torch, on a machine with PyTorch and a GPU) over the PyTorch operator timed here with the
same protocol (L2 flushed before each sample, CUDA events, median); evaluations per GPU-minute;
verdict counts.

    python bench/run_report.py runs/<run_id> [--torch]
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np

from fsr import lineage, tasks

TORCH_OPS = {
    "softmax": lambda t, x: t.softmax(x["x"], dim=1),
    "layernorm": lambda t, x: t.nn.functional.layer_norm(x["x"], (x["x"].shape[1],), x["weight"], x["bias"], eps=1e-5),
    "sgemm": lambda t, x: t.matmul(x["A"], x["B"]),
}


def torch_median_us(task_name: str, samples: int = 100) -> float | None:
    """The PyTorch operator at the task's benchmark size (TF32 off), median of `samples`."""
    import torch

    if task_name not in TORCH_OPS:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    task = tasks.load(task_name)
    size = dict(task.bench_size)
    host = tasks.functions(task).make_inputs(size, np.random.default_rng(0))
    inputs = {k: torch.from_numpy(v).cuda() for k, v in host.items()}
    op = TORCH_OPS[task_name]
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(5):
        op(torch, inputs)
    times = []
    for _ in range(samples):
        flush.zero_()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        op(torch, inputs)
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1000.0)
    return float(np.median(times))


def main(run_dir: str, with_torch: bool) -> None:
    rows = lineage.read(run_dir).to_pylist()
    info = lineage.read_run_json(run_dir)
    print(f"run {Path(run_dir).name}: {info.get('command', '')}")
    print("| task | evaluations | best median us | of ceiling | vs baseline | vs library | vs torch "
          "| evals per GPU-minute | verdicts |")
    print("|---|---|---|---|---|---|---|---|---|")
    for task_name in sorted({r["task"] for r in rows}):
        mine = [r for r in rows if r["task"] == task_name]
        ok = [r for r in mine if r["verdict"] == "OK" and r["median_us"]]
        best = min(ok, key=lambda r: r["median_us"]) if ok else None
        starts = [r["started_at"] or r["finished_at"] for r in mine]
        minutes = (max(r["finished_at"] for r in mine) - min(starts)).total_seconds() / 60
        gpus = len({r["worker"] for r in mine}) or 1
        verdicts = ", ".join(f"{k} {v}" for k, v in Counter(r["verdict"] for r in mine).most_common())
        if best is None:
            print(f"| {task_name} | {len(mine)} | none correct | | | | | {len(mine) / max(minutes * gpus, 1e-9):.1f} "
                  f"| {verdicts} |")
            continue
        torch_us = torch_median_us(task_name) if with_torch else None
        lib = f"{best['library_us'] / best['median_us']:.2f}x" if best["library_us"] else ""
        vs_torch = f"{torch_us / best['median_us']:.2f}x ({torch_us:.1f} us)" if torch_us else ""
        print(f"| {task_name} | {len(mine)} | {best['median_us']:.1f} | {100 * best['ceiling_fraction']:.1f}% "
              f"| {best['speedup']:.2f}x | {lib} | {vs_torch} | {len(mine) / max(minutes * gpus, 1e-9):.1f} "
              f"| {verdicts} |")


if __name__ == "__main__":
    main(sys.argv[1], "--torch" in sys.argv[2:])
