"""Tolerances with a floor and stress checks (fsr.dtypes.bounds through gpu.verify.expect, gpu.inputs), without
a GPU: the absolute part of a float tolerance is capped at a fraction of the reference's RMS, so
zeros never pass on an op whose outputs are small; the floor changes nothing at any built-in task's
test sizes; honest float32 arithmetic (NumPy emulations of softmax, sgemm, layer norm) passes at
inputs scaled by 1e-3 and 64; and every task with float inputs gets those stress checks unless
its task.toml opts out."""

from __future__ import annotations

import numpy as np
import pytest

from fsr import tasks
from fsr.dtypes import ATOL_RMS_FRACTION, Tolerance
from fsr.evaluate.gpu import inputs as pool_inputs
from fsr.evaluate.gpu.verify import compare, expect
from tests.unit.test_tasks import layernorm_f32, softmax_f32

F32 = np.float32


def test_zeros_do_not_pass_on_an_op_with_small_outputs():
    task = tasks.load("gemv")  # atol 4e-3
    ref = np.random.default_rng(0).standard_normal(4096) * 1e-4  # outputs far below atol
    exp = expect(ref, "float32", tasks.tolerance(task))
    ok, _, detail = compare("y", np.zeros(4096, F32), exp)
    assert not ok and "elements wrong" in detail
    assert compare("y", ref.astype(F32), exp)[0]  # the right answer still passes


def test_an_all_zero_reference_keeps_its_atol():
    exp = expect(np.zeros(16), "float32", Tolerance(1e-3, 1e-5))
    assert compare("y", np.full(16, 5e-4, F32), exp)[0]


def test_integer_outputs_are_compared_as_before():
    exp = expect(np.arange(10), "int32", Tolerance(0.5, 1e-12))
    assert compare("y", np.arange(10, dtype=np.int32), exp)[0]
    wrong = np.arange(10, dtype=np.int32)
    wrong[3] += 1
    assert not compare("y", wrong, exp)[0]


@pytest.mark.parametrize("name", tasks.list_tasks())
def test_the_floor_changes_nothing_at_the_test_sizes(name):
    """Every float output's atol is within ATOL_RMS_FRACTION of its RMS at every test size (the
    largest test size of the biggest tasks skipped: their references are slow on two cores)."""
    task = tasks.load(name)
    module = tasks.functions(task)
    for size in task.test_sizes:
        size = dict(size)
        if np.prod(list(size.values()), dtype=np.float64) > 5e7:
            continue
        ins = module.make_inputs(size, np.random.default_rng(0))
        for out, ref in module.reference({k: v.copy() for k, v in ins.items()}, size).items():
            dtype = next(a.dtype for a in task.outputs if a.name == out)
            ref = np.asarray(ref, np.float64)
            rms = float(np.sqrt(np.mean(ref * ref)))
            if np.dtype(dtype).kind == "f" and rms > 0:
                assert task.atol <= ATOL_RMS_FRACTION * rms, (name, size, out, task.atol / rms)


def stressed(name: str, size: dict[str, int], scale: float):
    task = tasks.load(name)
    module = tasks.functions(task)
    dtypes = {a.name: a.dtype for a in task.outputs}
    ins, expected = pool_inputs.make_content(task, module, dtypes, size, np.random.default_rng(1), scale)
    return ins, expected


@pytest.mark.parametrize("scale", pool_inputs.STRESS_SCALES)
def test_honest_float32_passes_the_stress_checks(scale):
    rng = np.random.default_rng(0)
    ins, exp = stressed("softmax", {"rows": 100, "cols": 257}, scale)
    for fast in (False, True):
        assert compare("y", softmax_f32(ins["x"], fast, True, rng), exp["y"])[0], (scale, fast)
    ins, exp = stressed("sgemm", {"M": 65, "N": 63, "K": 1000}, scale)
    assert compare("C", ins["A"] @ ins["B"], exp["C"])[0], scale
    ins, exp = stressed("layernorm", {"rows": 100, "cols": 257}, scale)
    for kind in ("two-pass", "block", "welford"):
        got = layernorm_f32(ins["x"], ins["weight"], ins["bias"], kind, rng)
        assert compare("y", got, exp["y"])[0], (scale, kind)


def test_a_kernel_that_drops_small_outputs_fails_the_small_stress_check():
    ins, exp = stressed("sgemm", {"M": 65, "N": 63, "K": 1000}, 1e-3)
    assert not compare("C", np.zeros((65, 63), F32), exp["C"])[0]


def test_stress_checks_follow_the_task():
    softmax = tasks.load("softmax")
    checks = pool_inputs.stress_checks(softmax)
    plain = len(softmax.test_sizes)
    assert checks[:plain] == tuple((i, 1.0) for i in range(plain))
    assert checks[plain:] == tuple((plain - 2, s) for s in pool_inputs.STRESS_SCALES)
    import dataclasses

    assert pool_inputs.stress_checks(dataclasses.replace(softmax, stress=False)) == checks[:plain]
    histogram = tasks.load("histogram")  # integer inputs only: nothing to scale
    assert pool_inputs.stress_checks(histogram) == tuple((i, 1.0) for i in range(len(histogram.test_sizes)))


def test_only_float_inputs_are_scaled():
    ins = {"x": np.ones(4, F32), "t": np.arange(4, dtype=np.int64)}
    out = pool_inputs.scaled(ins, 64.0)
    assert out["x"].dtype == F32 and (out["x"] == 64).all() and out["t"] is ins["t"]


def test_the_pool_makes_the_stress_items():
    task = tasks.load("softmax")
    pool = pool_inputs.InputPool(task, seed=0, depth=1)
    try:
        plain, _ = pool.take(len(task.test_sizes) - 2)
        small, _ = pool.take(len(task.test_sizes))
        big, _ = pool.take(len(task.test_sizes) + 1)
    finally:
        pool.stop()
    rms = {k: float(np.sqrt(np.mean(np.square(v["x"], dtype=np.float64)))) for k, v in
           (("plain", plain), ("small", small), ("big", big))}
    assert small["x"].shape == plain["x"].shape == big["x"].shape
    assert rms["small"] == pytest.approx(rms["plain"] * 1e-3, rel=0.2)
    assert rms["big"] == pytest.approx(rms["plain"] * 64, rel=0.2)
