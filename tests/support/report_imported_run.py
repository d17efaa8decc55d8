"""A small run directory for the report's comparator tests: a built-in task timed against every
comparator, an imported bfloat16 GEMM (no baseline, no library) bound by the tensor cores, an
imported task whose PyTorch comparators never came back, and a worker whose charged time is more
than the run's span (an impossible share)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.support.lineage_rows import T0, row, write_run

COPY_GBPS, SGEMM_TFLOPS, BF16_TFLOPS = 3900.0, 51.0, 700.0
# task: dtype, baseline, library, PyTorch eager, torch.compile, roofline us, best us, FLOPs per byte
TASKS: dict[str, tuple[Any, ...]] = {
    "softmax": ("float32", 4825.0, 1210.3, 310.8, 205.7, 128.0, 169.0, 2.5),
    "kb_matmul_bf16": ("bfloat16", None, None, 90.0, 80.0, 41.0, 68.0, 1365.0),
    "kb_conv": ("float32", None, None, None, None, 50.0, 100.0, 1.0),
}


def rates(dtype: str, intensity: float, fraction: float) -> dict[str, float]:
    """GB/s and TFLOP/s of a kernel at `fraction` of the roofline, as the judge records them."""
    flops = BF16_TFLOPS if dtype == "bfloat16" else SGEMM_TFLOPS
    if intensity * COPY_GBPS / 1000 < flops:
        gbps = fraction * COPY_GBPS
        return {"gbps": gbps, "tflops": gbps * intensity / 1000}
    tflops = fraction * flops
    return {"gbps": tflops * 1000 / intensity, "tflops": tflops}


def task_rows(task: str, evaluations: int = 6) -> list[dict[str, Any]]:
    dtype, baseline, library, eager, compiled, roofline, best, intensity = TASKS[task]
    out = []
    for i in range(evaluations):
        median = best * (1 + 0.1 * (evaluations - 1 - i))
        fraction = roofline / median
        out.append(row(candidate_id=f"{task}-{i}", task=task, dtype=dtype, median_us=median, p10_us=0.97 * median,
                       p90_us=1.05 * median, ceiling_fraction=fraction, **rates(dtype, intensity, fraction),
                       baseline_us=baseline, library_us=library, torch_us=eager, torch_compile_us=compiled,
                       registers=40 + i, spill_bytes=24 if i == evaluations - 1 and task == "kb_conv" else 0,
                       proposer="seed" if i == 0 else "mutate", island=i % 2,
                       features_detected=["VEC4"] if i % 2 else ["UNROLL"],
                       parents=[f"{task}-{i - 1}"] if i else [], worker="gpu0", wall_s=0.3,
                       started_at=T0 + timedelta(seconds=i), finished_at=T0 + timedelta(seconds=i + 1)))
    return out


def write_imported_run(run_dir: Path, compile_off: bool = False) -> Path:
    """The three tasks' rows and two on gpu1 charged 30 s each in the run's 10 s: gpu1's share
    of the span is 600%. `compile_off`: a run whose config switched torch.compile off."""
    rows = [{**r, "torch_compile_us": None if compile_off else r["torch_compile_us"]}
            for task in TASKS for r in task_rows(task)]
    rows += [row(candidate_id=f"late-{i}", task="softmax", verdict="WRONG", median_us=None, worker="gpu1",
                 wall_s=30.0, started_at=T0 + timedelta(seconds=8 + i), finished_at=T0 + timedelta(seconds=9 + i))
             for i in range(2)]
    config = {"search": {"islands": 2}, **({"eval": {"torch_compile": "off"}} if compile_off else {})}
    info = {"config": config, "campaigns": [{"evaluations": len(rows), "wall_s": 10.0, "stopped_by": "wall time"}]}
    return write_run(run_dir, rows, info)
