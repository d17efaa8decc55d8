"""Times the library comparators of spmv_csr, gelu and nbody at their benchmark sizes: each
task's `library` now against the one it replaced (kept below as `old_*`), and PyTorch eager where
torch imports. CUDA events around each call on one input set after a warm-up: the median of 20
calls timed one at a time (`alone_us`: the host's time to queue a call is inside when the GPU
waits for it) and the mean of 20 queued back to back (`queued_us`: the GPU's time, close to
fsr's held protocol). No L2 flush: every input here but nbody's is far larger than L2, and
nbody's is compute-bound.

    python bench/comparators.py [TASK ...]   (from the repository root, fsr importable)

An H100 (2026-11-25), alone_us / queued_us: spmv_csr old 54267 / 54039, new 265.5 / 182.1
(torch 245.9 / 202.1); gelu old 2957 / 2877, new 335.6 / 319.6 (torch 204.7 / 181.4); nbody
old 21145 / 20974, new 2132 / 2001 (torch 13114 / 12819).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import cupy as cp
import numpy as np

from fsr import tasks

Comparator = Callable[[dict[str, Any], dict[str, int]], Any]
CALLS = 20
WARMUP_CALLS = 3


def old_spmv_csr(inputs: dict[str, Any], sizes: dict[str, int]) -> dict[str, Any]:
    """The matrix built (and made canonical by the product: a sort of every entry) in every call."""
    import cupyx.scipy.sparse as sparse

    a = sparse.csr_matrix((inputs["vals"], inputs["col_idx"], inputs["row_ptr"]), shape=(sizes["rows"], sizes["cols"]))
    return {"y": a @ inputs["x"]}


def old_gelu(inputs: dict[str, Any], sizes: dict[str, int]) -> dict[str, Any]:
    """A chain of ufuncs, each a pass over memory."""
    x = inputs["x"]
    c, k = cp.float32(0.7978845608028654), cp.float32(0.044715)
    return {"y": cp.float32(0.5) * x * (cp.float32(1.0) + cp.tanh(c * (x + k * x * x * x)))}


def old_nbody(inputs: dict[str, Any], sizes: dict[str, int]) -> dict[str, Any]:
    """Broadcast n x m x 3 temporaries in chunks of 2^26 pairs."""
    t, s = inputs["targets"], inputs["sources"]
    acc = cp.empty_like(t)
    step = max(1, (1 << 26) // max(len(s), 1))
    for lo in range(0, len(t), step):
        d = s[None, :, :3] - t[lo:lo + step, None, :]
        r2 = (d * d).sum(axis=2) + cp.float32(1e-2)
        w = s[None, :, 3] / (r2 * cp.sqrt(r2))
        acc[lo:lo + step] = (w[:, :, None] * d).sum(axis=1)
    return {"acc": acc}


OLD: dict[str, Comparator] = {"spmv_csr": old_spmv_csr, "gelu": old_gelu, "nbody": old_nbody}


def times_us(fn: Comparator, inputs: dict[str, Any], sizes: dict[str, int]) -> tuple[float, float]:
    """`fn(inputs, sizes)`: (median of CALLS calls timed alone, mean of CALLS calls queued back to
    back), microseconds."""

    def call() -> None:
        fn(inputs, sizes)

    for _ in range(WARMUP_CALLS):
        call()
    cp.cuda.Device().synchronize()
    alone = []
    for _ in range(CALLS):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        call()
        end.record()
        end.synchronize()
        alone.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(CALLS):
        call()
    end.record()
    end.synchronize()
    return float(np.median(alone)), cp.cuda.get_elapsed_time(start, end) * 1e3 / CALLS


def comparators(name: str, module: Any) -> dict[str, Comparator]:
    """The comparators of task `name` to time, by label."""
    found: dict[str, Comparator] = {"library (old)": OLD[name], "library": module.library}
    try:
        import torch  # noqa: F401

        found["torch_eager"] = module.torch_eager
    except ImportError:
        pass
    return found


def main(names: list[str]) -> None:
    print(f"{'task':<9} {'comparator':<14} {'alone_us':>10} {'queued_us':>10}")
    for name in names:
        task = tasks.load(name)
        module = tasks.functions(task)
        sizes = dict(task.bench_size)
        inputs = {k: cp.asarray(v) for k, v in module.make_inputs(sizes, np.random.default_rng(0)).items()}
        for label, fn in comparators(name, module).items():
            alone_us, queued_us = times_us(fn, inputs, sizes)
            print(f"{name:<9} {label:<14} {alone_us:>10.1f} {queued_us:>10.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or list(OLD))
