"""An output's expected values and bounds (fsr.evaluate.gpu.verify.expect, fsr.dtypes.bounds),
computed with as few full-size arrays as they can be: the same numbers, bit for bit, as the
plain formula |out - ref| <= atol + rtol * max(|ref|, floor * mean |ref|), and the reference
left as it was. No GPU."""

from __future__ import annotations

import numpy as np
import pytest

from fsr import dtypes
from fsr.evaluate.gpu.verify import expect


def plain_bounds(reference: np.ndarray, tol: dtypes.Tolerance) -> np.ndarray:
    """The bound as written in docs/judge.md, one temporary array a step."""
    ref = np.abs(np.asarray(reference, dtype=np.float64))
    if tol.floor > 0:
        ref = np.maximum(ref, tol.floor * dtypes.magnitude(reference))
    with np.errstate(invalid="ignore"):  # inf * 0: nan, as in fsr's own
        return tol.atol + tol.rtol * ref


def references() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    wide = rng.standard_normal(4099) * np.float64(1e3)
    wide[[3, 40, 400]] = [np.inf, -np.inf, np.nan]  # non-finite: their bounds are non-finite too
    return [wide, wide.astype(np.float32), rng.integers(-2**40, 2**40, size=1000, dtype=np.int64),
            np.cumsum(rng.integers(0, 16, size=777, dtype=np.int32), dtype=np.int64), np.zeros(5)]


TOLERANCES = [dtypes.Tolerance(1e-5, 1e-5), dtypes.Tolerance(0.5, 1e-12), dtypes.Tolerance(0.0, 1e-2, 1e-2),
              dtypes.Tolerance(0.0, 0.0)]


@pytest.mark.parametrize("tol", TOLERANCES, ids=str)
@pytest.mark.parametrize("index", range(5))
def test_bounds_are_the_plain_formulas_bit_for_bit_and_leave_the_reference(index, tol):
    reference = references()[index]
    before = reference.copy()
    with np.errstate(invalid="ignore"):
        got = dtypes.bounds(reference, tol)
    want = plain_bounds(reference, tol)
    assert got.dtype == np.float64 and np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(reference, before, equal_nan=True)
    assert not np.shares_memory(got, reference)


@pytest.mark.parametrize(("dtype", "kind"), [("float32", np.float32), ("int32", np.float64), ("float64", np.float64),
                                             ("bfloat16", np.float32)])
def test_expected_values_and_bounds_are_as_before_in_the_kept_dtype(dtype, kind):
    tol = dtypes.Tolerance(1e-5, 1e-3, 1e-2)
    for reference in references():
        before = reference.copy()
        got = expect(reference, dtype, tol)
        assert got.value.dtype == kind and got.bound.dtype == kind
        assert np.array_equal(got.value, np.asarray(reference, dtype=np.float64).astype(kind), equal_nan=True)
        assert np.array_equal(got.bound, plain_bounds(reference, tol).astype(kind), equal_nan=True)
        assert np.array_equal(reference, before, equal_nan=True)



def test_the_expected_values_are_never_the_reference_functions_own_array():
    """A reference function may return a slice, a broadcast, or a buffer it keeps and writes again
    at its next call: the expected values are an array of their own, whole and writeable."""
    tol = dtypes.Tolerance(1e-5, 1e-3)
    whole = np.arange(24, dtype=np.float64).reshape(4, 6)
    kept = np.linspace(0.0, 1.0, 7)
    for given in (whole[1:3], np.broadcast_to(np.float64(2.5), (3, 5)), whole.T, kept):
        got = expect(given, "float64", tol)
        assert not np.shares_memory(got.value, given) and got.value.flags.writeable
        assert np.array_equal(got.value, given)
    before = expect(kept, "float64", tol)
    kept *= 2.0  # the function's next call writes its buffer again
    assert np.array_equal(before.value, np.linspace(0.0, 1.0, 7))
