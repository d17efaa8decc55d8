"""Checking a candidate's outputs: runs at one size against the float64 reference, every element
compared, inputs and canaries checked after.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import cupy as cp
import numpy as np

from fsr import dtypes
from fsr.evaluate.gpu.buffers import Buffers, damage, make_buffers
from fsr.evaluate.gpu.programs import Program, enqueue, plan, synchronize
from fsr.types import Candidate, SizeCheck, Task, size_label

MAX_SHOWN = 4
PARALLEL_ELEMENTS = 1 << 22  # compare on several threads above this many elements
COMPARE_THREADS = 8


def check_size(program: Program, cand: Candidate, task: Task, size: tuple[tuple[str, int], ...],
               host_inputs: dict[str, np.ndarray], expected: dict[str, Expected],
               stream: cp.cuda.Stream, runs: int = 2, buffers: Buffers | None = None) -> SizeCheck:
    """Run the candidate `runs` times on the same inputs; every run must match the reference,
    leave its inputs and every canary untouched. Raises LaunchRefused / ContextLost.

    Everything runs in order on `stream` (buffers, poison, launches, copies back), so nothing
    waits on another stream. `buffers` (holding `host_inputs`) may be passed in to be reused;
    a check that fails leaves them unfit for reuse. Inputs and canaries are checked after the
    last run (damage stays), and before reporting a wrong output."""
    sizes = dict(size)
    with stream:
        buf = buffers or make_buffers(task, cand, sizes, host_inputs)
        launches = plan(program, cand, task, sizes, {k: g.array for k, g in buf.all().items()})
        worst = 0.0
        for run in range(1, runs + 1):
            buf.reset(cand)
            program.reset_globals(stream)
            enqueue(launches, stream)
            synchronize(stream)
            for name, g in buf.outputs.items():
                ok, err, detail = compare(name, g.host(), expected[name])
                worst = max(worst, err)
                if not ok:
                    prefix = f"run {run} of {runs}: " if run > 1 else ""
                    return SizeCheck(size, False, err, damage(buf, host_inputs) or prefix + detail)
        problem = damage(buf, host_inputs)
    return SizeCheck(size, not problem, worst, problem)


@dataclass(frozen=True)
class Expected:
    """A float64 reference prepared for fast checks: in the dtype fsr.dtypes.expected_dtype gives
    the output (float32 for float32 and the low-precision floats, rounding far below any
    tolerance) with each element's allowed deviation (fsr.dtypes.bounds) precomputed."""

    value: np.ndarray
    bound: np.ndarray


def expect(reference: np.ndarray, dtype: str, tol: dtypes.Tolerance) -> Expected:
    ref = np.asarray(reference, dtype=np.float64)
    kind = dtypes.expected_dtype(dtype)
    # No second copy of an array converted here (an integer output's); the reference's own array is
    # copied, as it always was: a reference function may keep it and write it again (a buffer
    # reused from call to call), and the expected values must not change with it.
    return Expected(ref.astype(kind, copy=ref is reference), dtypes.bounds(ref, tol).astype(kind, copy=False))


def _chunk_check(got: np.ndarray, value: np.ndarray, bound: np.ndarray) -> tuple[bool, float]:
    diff = np.abs(got - value)
    ok = bool((diff <= bound).all())  # NaN compares False, so it counts as bad
    return ok, float(diff.max()) if ok and diff.size else 0.0


def _fast_pass(got: np.ndarray, expected: Expected) -> tuple[bool, float]:
    """Whether every element passes, and the largest error if so; large arrays are checked in
    chunks on threads (numpy releases the GIL), which matters at benchmark sizes."""
    flat_got, flat_val, flat_bound = got.reshape(-1), expected.value.reshape(-1), expected.bound.reshape(-1)
    if flat_got.size < PARALLEL_ELEMENTS:
        return _chunk_check(flat_got, flat_val, flat_bound)
    edges = np.linspace(0, flat_got.size, COMPARE_THREADS + 1, dtype=np.int64)
    parts = list(_compare_pool().map(lambda i: _chunk_check(flat_got[edges[i]:edges[i + 1]],
                                                            flat_val[edges[i]:edges[i + 1]],
                                                            flat_bound[edges[i]:edges[i + 1]]),
                                     range(COMPARE_THREADS)))
    return all(ok for ok, _ in parts), max(err for _, err in parts)


@functools.cache
def _compare_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(COMPARE_THREADS, thread_name_prefix="fsr-compare")


def compare(name: str, got: np.ndarray, expected: Expected) -> tuple[bool, float, str]:
    """(passed, max abs error, first mismatches) of every element against the reference; a
    low-precision output is converted to the expected values' dtype (exactly) first."""
    got = got.astype(expected.value.dtype, copy=False)
    ok, worst = _fast_pass(got, expected)
    if ok:
        return True, worst, ""
    diff = np.abs(got - expected.value)
    bad = ~(diff <= expected.bound)
    finite = diff[np.isfinite(diff)]
    worst = float(finite.max()) if finite.size else 0.0
    idx = np.argwhere(bad)[:MAX_SHOWN]
    shown = "; ".join(f"{name}[{', '.join(map(str, i))}] got {float(got[tuple(i)]):.6g} "
                      f"expected {float(expected.value[tuple(i)]):.6g}" for i in idx)
    unwritten = int(np.isnan(got).sum())
    note = f" ({unwritten} never written: still NaN)" if unwritten else ""
    return False, worst, f"{int(bad.sum())} of {bad.size} elements wrong{note}; {shown}"


def describe(check: SizeCheck) -> str:
    return f"at {size_label(check.size)}: {check.detail}"
