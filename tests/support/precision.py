"""NumPy emulations of honest float32 kernels and of reduced-precision ones, and the ratio of an
output's error to a task's tolerance: the tolerance tests of the built-in tasks share them."""

from __future__ import annotations

import numpy as np

from fsr import tasks

HONEST_MAX = 0.5  # honest kernels use at most half the tolerance
CHEAT_MIN = 2.0  # reduced precision exceeds it at least twice over
F32 = np.float32


def load(name: str):
    task = tasks.load(name)
    return task, tasks.functions(task)


def make(name: str, size: dict[str, int], seed: int = 0):
    task, fn = load(name)
    inputs = fn.make_inputs(size, np.random.default_rng(seed))
    return task, inputs, fn.reference({k: v.copy() for k, v in inputs.items()}, size)


def ratio(got: np.ndarray, ref: np.ndarray, task) -> float:
    """Worst |got - ref| / (atol + rtol * |ref|): at most 1 passes the task's check."""
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(got.astype(np.float64) - ref) / (task.atol + task.rtol * np.abs(ref))))


# ---- reduced precision -----------------------------------------------------------------------

def keep_bits(x: np.ndarray, mantissa_bits: int) -> np.ndarray:
    """float32 rounded to nearest even with `mantissa_bits` explicit mantissa bits."""
    drop = 23 - mantissa_bits
    u = np.ascontiguousarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    u = (u + (1 << (drop - 1)) - 1 + ((u >> drop) & 1)) & ~np.uint64((1 << drop) - 1)
    return u.astype(np.uint32).view(F32)


def bf16(x):
    return keep_bits(x, 7)


def tf32(x):
    return keep_bits(x, 10)


def fp16(x):
    return np.asarray(x, F32).astype(np.float16).astype(F32)


def ulp_noise(v: np.ndarray, ulps: float, rng) -> np.ndarray:
    """v with a relative error of up to `ulps` float32 ulps (an intrinsic's error bound)."""
    return (v * (1 + rng.uniform(-ulps, ulps, v.shape) * 2.0**-24)).astype(F32)


def seq_sum(v: np.ndarray) -> np.ndarray:
    """Row sums in float32, one element after another (the worst order a kernel may use)."""
    return np.cumsum(v, axis=1, dtype=F32)[:, -1:]


def strided_tree_sum(v: np.ndarray, threads: int = 256) -> np.ndarray:
    """Row sums as a block computes them: each thread a strided sequential sum, then a tree."""
    rows, cols = v.shape
    padded = np.concatenate([v, np.zeros((rows, (-cols) % threads), F32)], axis=1)
    part = np.cumsum(padded.reshape(rows, -1, threads), axis=1, dtype=F32)[:, -1, :]
    while part.shape[1] > 1:
        half = part.shape[1] // 2
        part = (part[:, :half] + part[:, half:]).astype(F32)
    return part


def cases(name: str, **bench_part: int) -> list[dict[str, int]]:
    """Every test size, and a slice of the bench size (`bench_part` replaces its large sizes)."""
    task, _ = load(name)
    return [dict(s) for s in task.test_sizes] + [dict(task.bench_size) | bench_part]


def label(size: dict[str, int]) -> str:
    return "x".join(str(v) for v in size.values())


_PROBLEMS: dict[tuple[str, tuple[tuple[str, int], ...], str], tuple[dict[str, np.ndarray], np.ndarray]] = {}


def problem(task, size: dict[str, int], output: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The task's inputs at `size` (seed 0) and the reference's `output` for them, made once a
    process (every combination and mode of an emulation test runs on the same ones)."""
    key = (task.name, tuple(sorted(size.items())), output)
    if key not in _PROBLEMS:
        fn = tasks.functions(task)
        inputs = fn.make_inputs(size, np.random.default_rng(0))
        _PROBLEMS[key] = inputs, fn.reference({k: v.copy() for k, v in inputs.items()}, size)[output]
    return _PROBLEMS[key]
