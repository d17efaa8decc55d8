"""Tolerance of the fp8 task (quant_fp8: bfloat16 -> float8_e4m3fn with a float32 scale per row),
pinned by NumPy emulations as in test_tasks_bf16.py, against task.toml's rtol 0.08 with a
magnitude floor of 2^-10 (fsr.dtypes.bounds; q compared with the exact quotient x / scale).

Honest kernels (float32 max, scale = max / 448 rounded once, x divided by it or multiplied by its
reciprocal, rounded to nearest even and saturated) stay under 0.75 of the tolerance at every test
size and at the bench size's row length: rounding to nearest itself uses up to 1/17 of |q|, 0.735
of rtol. Truncating instead of rounding, rounding to e5m2, a scale off by 2x (in q or in scale
alone), one scale for every row, bfloat16 bytes in q's buffer and zeros fail. A truncating kernel
errs by at most one e4m3 step, so it fails by a third, not twice over as the float32 tasks'
cheats must: no rtol separates the two roundings by more (task.toml).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fsr import dtypes, tasks
from tests.support.precision import cases, label, load, make

F32 = np.float32
BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
E5M2 = ml_dtypes.float8_e5m2
HONEST_LIMIT = 0.75  # rounding to nearest alone reaches 0.735 of rtol 0.08
TRUNCATION_MIN = 1.25  # truncation reaches 0.111 / 0.08 = 1.39 in any long row
CHEAT_MIN = 5.0  # a wrong scale, wrong bytes or zeros: far outside


def ratios(got: dict[str, np.ndarray], ref: dict[str, np.ndarray], task) -> dict[str, float]:
    """Worst |got - ref| / bound of each output (inf where an element is NaN): at most 1 passes."""
    tol = tasks.tolerance(task)
    out = {}
    for name, want in ref.items():
        want = np.asarray(want, np.float64)
        err = np.abs(np.asarray(got[name]).astype(np.float64) - want) / dtypes.bounds(want, tol)
        out[name] = float(np.max(np.where(np.isnan(err), np.inf, err)))
    return out


def saturate(v: np.ndarray) -> np.ndarray:
    return np.clip(v, -448.0, 448.0).astype(F32)


def round_e4m3(v: np.ndarray) -> np.ndarray:
    """float32 to e4m3, to nearest even, saturating (what __nv_cvt_float_to_fp8 with
    __NV_SATFINITE does): the fp8 array."""
    return saturate(v).astype(E4M3)


def truncate_e4m3(v: np.ndarray) -> np.ndarray:
    """float32 to e4m3 rounding toward zero: where nearest rounded away from zero, one step back
    (e4m3's magnitude bits count up with the value)."""
    near = round_e4m3(v)
    bits = near.view(np.uint8).copy()
    away = (np.abs(near.astype(np.float64)) > np.abs(saturate(v).astype(np.float64))) & (bits & 0x7F > 0)
    bits[away] -= 1
    return bits.view(E4M3)


def quantise(x: np.ndarray, reciprocal: bool = False, rounding=round_e4m3,
             scale_factor: float = 1.0, one_scale: bool = False) -> dict[str, np.ndarray]:
    """A kernel in float32: the row's largest |x| (exact), scale = max / 448 rounded once (1 for a
    row of zeros), q = x / scale or x * (1 / scale), each rounded once; then converted by
    `rounding`. scale_factor and one_scale make the wrong scales of the cheats."""
    x = x.astype(F32)
    amax = np.abs(x).max(axis=1)
    if one_scale:
        amax = np.full_like(amax, amax.max())
    scale = np.where(amax > 0, amax / F32(448), F32(1)).astype(F32) * F32(scale_factor)
    if reciprocal:
        v = (x * (F32(1) / scale)[:, None].astype(F32)).astype(F32)
    else:
        v = (x / scale[:, None]).astype(F32)
    return {"q": rounding(v), "scale": scale}


def test_quant_fp8_gives_its_own_tolerance():
    task, _ = load("quant_fp8")
    assert task.dtype == "float8_e4m3fn/float32"
    assert (task.atol, task.rtol, task.floor) == (0.0, 0.08, 2.0**-10)
    # the rtol lies between rounding to nearest's worst (half a step, at a tie above a power of
    # two) and truncation's (a whole step just below 1.125 x 2^k)
    assert 2.0**-4 / (1 + 2.0**-4) < task.rtol * HONEST_LIMIT and task.rtol * TRUNCATION_MIN < 2.0**-3 / (1 + 2.0**-3)


def test_quant_fp8_reference_scales_each_row_to_448_and_keeps_a_row_of_zeros_at_scale_1():
    task, inputs, ref = make("quant_fp8", {"rows": 64, "cols": 1024})
    x = inputs["x"].astype(np.float64)
    zero = np.flatnonzero(~x.any(axis=1))
    assert zero.size == 1 and ref["scale"][zero[0]] == 1.0 and not ref["q"][zero[0]].any()
    rest = np.delete(np.abs(ref["q"]), zero, axis=0)
    assert np.allclose(rest.max(axis=1), 448.0)
    scales = np.delete(ref["scale"], zero)
    assert scales.max() / scales.min() > 20  # rows of different magnitudes
    # rows with one outlier quantise the rest to small values: some land among e4m3's subnormals
    assert ((rest > 0) & (rest < 2.0**-6)).any()


@pytest.mark.parametrize("size", cases("quant_fp8", rows=64), ids=label)
def test_quant_fp8_tolerance_passes_honest_float32_rounded_to_nearest(size):
    task, inputs, ref = make("quant_fp8", size)
    for reciprocal in (False, True):
        got = quantise(inputs["x"], reciprocal)
        worst = ratios(got, ref, task)
        assert max(worst.values()) <= HONEST_LIMIT, f"reciprocal={reciprocal}: {worst}"


def test_quant_fp8_reference_is_not_rounded_since_honest_kernels_land_either_side_of_a_tie():
    # Rounded to e4m3, the reference would differ from an honest float32 kernel by a whole step
    # wherever the float32 quotient falls on the other side of a tie: as much as truncation.
    task, inputs, ref = make("quant_fp8", {"rows": 1024, "cols": 8192})
    got = quantise(inputs["x"], reciprocal=True)["q"].astype(np.float64)
    rounded = round_e4m3(ref["q"]).astype(np.float64)
    assert (got != rounded).any()


@pytest.mark.parametrize("size", [{"rows": 129, "cols": 4099}, {"rows": 64, "cols": 8192}], ids=label)
def test_quant_fp8_tolerance_fails_truncation_and_e5m2(size):
    task, inputs, ref = make("quant_fp8", size)
    x = inputs["x"]
    lower = {
        "truncated": quantise(x, rounding=truncate_e4m3),
        "e5m2 rounding": quantise(x, rounding=lambda v: saturate(v).astype(E5M2).astype(F32)),
    }
    for what, got in lower.items():
        assert ratios(got, ref, task)["q"] >= TRUNCATION_MIN, what


@pytest.mark.parametrize("size", [{"rows": 129, "cols": 4099}, {"rows": 64, "cols": 8192}], ids=label)
def test_quant_fp8_tolerance_fails_wrong_scales_bytes_and_zeros(size):
    task, inputs, ref = make("quant_fp8", size)
    x = inputs["x"]
    honest = quantise(x)
    bf16_bytes = (x.astype(F32) / honest["scale"][:, None]).astype(BF16).view(np.uint8)
    cheats = {
        "scale 2x, q by it": quantise(x, scale_factor=2.0),
        "scale 2x, q right": honest | {"scale": honest["scale"] * 2},
        "scale / 2, q by it": quantise(x, scale_factor=0.5),
        "one scale for all rows": quantise(x, one_scale=True),
        "bfloat16 bits in q": honest | {"q": bf16_bytes.reshape(-1)[: x.size].reshape(x.shape).view(E4M3)},
        "bfloat16 high bytes in q": honest | {"q": bf16_bytes[:, 1::2].copy().view(E4M3)},
        "zeros": {"q": np.zeros(x.shape, E4M3), "scale": np.zeros_like(honest["scale"])},
        "q zeros": honest | {"q": np.zeros(x.shape, E4M3)},
        "scale 0 for the row of zeros": honest | {"scale": np.where(honest["scale"] == 1, F32(0), honest["scale"])},
        "the smallest scale 2x": honest | {"scale": np.where(honest["scale"] == honest["scale"].min(), honest["scale"] * 2,
                                                            honest["scale"])},
        "q under 1 flushed to zero": honest | {"q": np.where(np.abs(honest["q"].astype(F32)) < 1, F32(0),
                                                             honest["q"].astype(F32)).astype(E4M3)},
    }
    for what, got in cheats.items():
        assert max(ratios(got, ref, task).values()) >= CHEAT_MIN, what


@pytest.mark.parametrize("size", cases("quant_fp8", rows=64), ids=label)
def test_quant_fp8_floor_lifts_only_subnormal_sized_elements_and_no_scale_from_17_rows(size):
    # task.toml's floor: the mean |q| is at least 50, so the floored bound is 4x the subnormals'
    # half step or more; from 17 rows on, floor x mean scale is under a fifth of every scale.
    task, fn = load("quant_fp8")
    for seed in range(20):
        inputs = fn.make_inputs(size, np.random.default_rng(seed))
        ref = fn.reference(inputs, size)
        mean_q = np.abs(ref["q"]).mean()
        assert 50 <= mean_q <= 448 and task.rtol * task.floor * mean_q >= 4 * 2.0**-10, seed
        if size["rows"] >= 17:
            live = ref["scale"][np.abs(inputs["x"].astype(np.float64)).max(axis=1) > 0]
            assert task.floor * ref["scale"].mean() < live.min() / 5, seed


def test_truncation_emulation_rounds_toward_zero():
    v = np.array([1.1, -1.1, 1.06, 1.2, 447.0, 500.0, 0.0], F32)
    assert truncate_e4m3(v).astype(F32).tolist() == [1.0, -1.0, 1.0, 1.125, 416.0, 448.0, 0.0]
    assert round_e4m3(v).astype(F32).tolist() == [1.125, -1.125, 1.0, 1.25, 448.0, 448.0, 0.0]
