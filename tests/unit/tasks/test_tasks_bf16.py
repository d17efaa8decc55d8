"""Tolerances of the bfloat16 tasks (softmax_bf16, rmsnorm_bf16), pinned by NumPy emulations as in
test_tasks_ai.py, against fsr's default for bfloat16 outputs (rtol 1e-2 with a magnitude floor,
fsr.dtypes.bounds): honest kernels (float32 arithmetic on the bfloat16 inputs in any summation
order, fast intrinsics or not, each output rounded to bfloat16 once) stay well inside it at every
test size and at the bench size's row length; a kernel that computes or stores in fp8, one that
skips the normalisation, and an output of zeros fail by a wide factor.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fsr import dtypes, tasks
from tests.support.precision import (
    CHEAT_MIN,
    HONEST_MAX,
    cases,
    label,
    load,
    make,
    seq_sum,
    strided_tree_sum,
    ulp_noise,
)

F32 = np.float32
BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
E5M2 = ml_dtypes.float8_e5m2


def ratio(got: np.ndarray, ref: np.ndarray, task) -> float:
    """Worst |got - ref| / bound, got converted to float64 first: at most 1 passes fsr's check."""
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(np.asarray(got).astype(np.float64) - ref) / dtypes.bounds(ref, tasks.tolerance(task))))


def through(v: np.ndarray, kind) -> np.ndarray:
    """v rounded to `kind` and back to float32 (fp8 saturating, as kernels' converts do)."""
    top = float(ml_dtypes.finfo(kind).max)
    return np.clip(v, -top, top).astype(kind).astype(F32)


def test_the_bf16_tasks_get_the_bfloat16_default_tolerance():
    for name in ("softmax_bf16", "rmsnorm_bf16"):
        task, _ = load(name)
        assert task.dtype == "bfloat16" and all(a.dtype == "bfloat16" for a in task.args)
        assert (task.atol, task.rtol, task.floor) == (0.0, dtypes.HALF_RTOL, dtypes.DEFAULT_FLOOR)


# ---- softmax_bf16 -------------------------------------------------------------------------------

def softmax_kernel(x: np.ndarray, fast: bool, block: bool, rng, normalise: bool = True) -> np.ndarray:
    """Float32 softmax of the bfloat16 inputs: expf (1 ulp) or __expf (2 ulp), the sum sequential
    or block-strided, one reciprocal (fast) or a division; the output rounded to bfloat16 once."""
    x = x.astype(F32)
    d = (x - x.max(axis=1, keepdims=True)).astype(F32)
    e = ulp_noise(np.exp(d.astype(np.float64)).astype(F32), 2 if fast else 1, rng)
    s = strided_tree_sum(e) if block else seq_sum(e)
    if not normalise:
        return e.astype(BF16)
    y = (e * (F32(1) / s)).astype(F32) if fast else (e / s).astype(F32)
    return y.astype(BF16)


@pytest.mark.parametrize("size", cases("softmax_bf16", rows=64), ids=label)
def test_softmax_bf16_tolerance_passes_honest_float32_arithmetic(size):
    task, inputs, ref = make("softmax_bf16", size)
    rng = np.random.default_rng(0)
    for fast in (False, True):
        for block in (False, True):
            got = softmax_kernel(inputs["x"], fast, block, rng)
            assert ratio(got, ref["y"], task) <= HONEST_MAX, f"fast={fast} block={block}"


@pytest.mark.parametrize("size", [{"rows": 129, "cols": 4099}, {"rows": 64, "cols": 8192}], ids=label)
def test_softmax_bf16_tolerance_fails_fp8_unnormalised_and_zeros(size):
    task, inputs, ref = make("softmax_bf16", size)
    rng = np.random.default_rng(0)
    honest = softmax_kernel(inputs["x"], False, True, rng).astype(F32)
    x = inputs["x"].astype(F32)
    fp8_inputs = {"x": through(x, E4M3).astype(BF16)}
    cheats = {
        "e4m3 outputs": through(honest, E4M3),
        "e5m2 outputs": through(honest, E5M2),
        "e4m3 inputs": softmax_kernel(fp8_inputs["x"], False, True, rng).astype(F32),
        "unnormalised": softmax_kernel(inputs["x"], False, True, rng, normalise=False).astype(F32),
        "zeros": np.zeros_like(honest),
    }
    for what, got in cheats.items():
        assert ratio(got, ref["y"], task) >= CHEAT_MIN, what


# ---- rmsnorm_bf16 -------------------------------------------------------------------------------

def rmsnorm_kernel(x: np.ndarray, w: np.ndarray, block: bool, rng, normalise: bool = True) -> np.ndarray:
    """Float32 RMS norm of the bfloat16 inputs: the sum of squares sequential or block-strided,
    rsqrtf (2 ulp); the output rounded to bfloat16 once."""
    x, w = x.astype(F32), w.astype(F32)
    if not normalise:
        return (x * w).astype(BF16)
    sq = (x * x).astype(F32)
    total = strided_tree_sum(sq) if block else seq_sum(sq)
    rstd = ulp_noise(F32(1) / np.sqrt((total / F32(x.shape[1]) + F32(1e-6)).astype(F32)), 2, rng)
    return ((x * rstd).astype(F32) * w).astype(F32).astype(BF16)


@pytest.mark.parametrize("size", cases("rmsnorm_bf16", rows=64), ids=label)
def test_rmsnorm_bf16_tolerance_passes_honest_float32_arithmetic(size):
    task, inputs, ref = make("rmsnorm_bf16", size)
    rng = np.random.default_rng(0)
    for block in (False, True):
        got = rmsnorm_kernel(inputs["x"], inputs["weight"], block, rng)
        assert ratio(got, ref["y"], task) <= HONEST_MAX, f"block={block}"


@pytest.mark.parametrize("size", [{"rows": 129, "cols": 4099}, {"rows": 64, "cols": 8192}], ids=label)
def test_rmsnorm_bf16_tolerance_fails_fp8_unnormalised_and_zeros(size):
    task, inputs, ref = make("rmsnorm_bf16", size)
    rng = np.random.default_rng(0)
    x, w = inputs["x"], inputs["weight"]
    honest = rmsnorm_kernel(x, w, True, rng).astype(F32)
    fp8 = {k: through(v.astype(F32), E4M3).astype(BF16) for k, v in inputs.items()}
    cheats = {
        "e4m3 outputs": through(honest, E4M3),
        "e5m2 outputs": through(honest, E5M2),
        "e4m3 inputs": rmsnorm_kernel(fp8["x"], fp8["weight"], True, rng).astype(F32),
        "unnormalised": rmsnorm_kernel(x, w, True, rng, normalise=False).astype(F32),
        "zeros": np.zeros_like(honest),
    }
    for what, got in cheats.items():
        assert ratio(got, ref["y"], task) >= CHEAT_MIN, what


def test_rmsnorm_bf16_eps_is_one_constant_for_kernels_and_reference():
    task, fn = load("rmsnorm_bf16")
    assert dict(task.constants) == {"eps": pytest.approx(fn.EPS)}
