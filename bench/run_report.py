"""Summary of a search run from its lineage, for BENCHMARKS.md: the task table of `fsr report`
(fsr.report.tables.task_summary: best latency, fraction of the device ceiling, speedups over the
baseline, the library and PyTorch eager, evaluations per GPU-minute, verdicts) as Markdown.

PyTorch eager comes from the lineage's `torch_us` (timed by the GPU worker). For a lineage
written before that column, `--torch` (on a machine with PyTorch and a GPU) times the operator
here with the same protocol (L2 flushed before each sample, CUDA events, median), TF32 off.

    python bench/run_report.py runs/<run_id> [--torch]
"""

from __future__ import annotations

import sys

import numpy as np

from fsr import lineage, tasks
from fsr.report import tables
from fsr.report.text import SUMMARY_MD, markdown_table

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
    host = tasks.functions(task).make_inputs(dict(task.bench_size), np.random.default_rng(0))
    inputs = {k: torch.from_numpy(v).cuda() for k, v in host.items()}
    op, flush = TORCH_OPS[task_name], torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
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
    frame = lineage.read_pandas(run_dir)
    if with_torch:  # fill what the lineage lacks: one timing per task, measured here
        missing = frame["torch_us"].isna()
        for task in frame.loc[missing, "task"].unique():
            frame.loc[missing & (frame["task"] == task), "torch_us"] = torch_median_us(str(task))
    print(f"run {lineage.read_run_json(run_dir).get('command', '')}")
    print(markdown_table(tables.task_summary(frame), SUMMARY_MD))


if __name__ == "__main__":
    main(sys.argv[1], "--torch" in sys.argv[2:])
