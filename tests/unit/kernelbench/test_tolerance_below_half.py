"""A float32 task's tolerance must fail a half-precision result (no torch: the rule on numbers).

`precision.below_half` takes the least atol at which each of PyTorch's float32 forward and the
float16 / bfloat16 emulations passes, and the atol derived from float32's error: it keeps that
atol where neither half passes it, caps it between float32's error and theirs where there is room,
and refuses the task where there is none."""

from __future__ import annotations

import numpy as np
import pytest

from fsr.kernelbench import precision
from fsr.kernelbench.probe import ProblemError


def test_least_atol_is_the_smallest_atol_that_passes_and_nan_passes_none():
    ref = np.array([1.0, -2.0, 100.0])
    out = np.array([1.001, -2.0, 100.0 + 2e-3])
    least = precision.least_atol([out], [ref], 1e-5)
    assert least == pytest.approx(1e-3)  # 100's element: 2e-3 - 1e-5 * 100, above 1.001's 1e-3 - 1e-5
    assert np.all(np.abs(out - ref) <= least + 1e-5 * np.abs(ref) + 1e-15)
    assert not np.all(np.abs(out - ref) <= 0.9 * least + 1e-5 * np.abs(ref))
    assert precision.least_atol([np.array([np.nan, 1.0])], [np.array([1.0, 1.0])], 1e-5) == np.inf


def test_an_atol_no_half_passes_is_kept():
    errors = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}
    assert precision.below_half(errors, 3.2e-5, scale=4.0) == (3.2e-5, "")


def test_an_atol_float16_passes_is_capped_between_float32_and_float16_and_said():
    errors = {"float32": 1e-4, "float16": 3e-3, "bfloat16": 2e-2}
    atol, note = precision.below_half(errors, 3.2e-3, scale=4.0)  # 32 x float32's error: float16 passes
    assert errors["float32"] * precision.F32_MARGIN_LEAST <= atol < errors["float16"]
    assert atol == pytest.approx((1e-4 * 3e-3) ** 0.5, rel=5e-3)
    assert "capped from 0.0032" in note and "float16 emulation passes" in note and "bfloat16" not in note


def test_no_room_between_float32_and_float16_refuses_the_task():
    errors = {"float32": 4e-3, "float16": 9.5e-4, "bfloat16": 7e-3}
    with pytest.raises(ProblemError, match="float16 and bfloat16 emulation .* passes any tolerance float32 needs"):
        precision.below_half(errors, 0.125, scale=4.0)
    errors = {"float32": 1e-4, "float16": 1.5e-3, "bfloat16": 1e-2}  # 15 times: a cap would leave float32 < 4x
    with pytest.raises(ProblemError, match="errs by up to 0.0001, float16 emulation by only 0.0015"):
        precision.below_half(errors, 3.2e-3, scale=4.0)


def test_float32_exact_still_needs_room_above_one_ulp_of_the_largest_output():
    errors = {"float32": 0.0, "float16": 1e-6, "bfloat16": 1e-2}  # float16 exact but for its last bits
    with pytest.raises(ProblemError):
        precision.below_half(errors, 2e-5, scale=4.0)  # 4 * 2^-24 = 2.4e-7: float16 is 4 ulps away
