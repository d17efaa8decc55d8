"""Stress checks of the low-precision tasks (fsr.evaluate.gpu.inputs), without a GPU: their
bfloat16 inputs are scaled by 1e-3 and 64 and rounded to bfloat16, like float32 inputs; at the
stress size of each built-in bfloat16 task, NumPy emulations of honest kernels (float32
arithmetic on the bfloat16 inputs, the output rounded to bfloat16 once) pass the bfloat16 default
tolerance, while an output of zeros, the answer for the inputs as drawn (a kernel that ignores
the scale) and the true answer 5% off fail."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from test_tasks_bf16 import rmsnorm_kernel, softmax_kernel

from fsr import tasks
from fsr.evaluate.gpu import inputs as pool_inputs
from fsr.evaluate.gpu.verify import compare

F32 = np.float32
BF16 = ml_dtypes.bfloat16
LOW_PRECISION_TASKS = ["gemm_bf16", "gemm_bf16_gelu", "rmsnorm_bf16", "softmax_bf16"]


def gelu_tanh_f32(x: np.ndarray) -> np.ndarray:
    """The tanh form of GELU in float32, as the template's epilogue computes it."""
    inner = (F32(np.sqrt(2.0 / np.pi)) * (x + F32(0.044715) * x * x * x)).astype(F32)
    return (F32(0.5) * x * (F32(1) + np.tanh(inner))).astype(F32)


def honest(name: str, ins: dict[str, np.ndarray]) -> np.ndarray:
    """A float32 computation of `name` on its bfloat16 inputs, rounded to bfloat16 once."""
    rng = np.random.default_rng(0)
    if name == "softmax_bf16":
        return softmax_kernel(ins["x"], True, True, rng)
    if name == "rmsnorm_bf16":
        return rmsnorm_kernel(ins["x"], ins["weight"], True, rng)
    acc = ins["A"].astype(F32) @ ins["B"].astype(F32)  # bfloat16 products are exact in float32
    if name == "gemm_bf16_gelu":
        acc = gelu_tanh_f32((acc + ins["bias"].astype(F32)).astype(F32))
    return acc.astype(BF16)


def test_every_low_precision_task_has_stress_checks_unless_it_opts_out():
    for name in LOW_PRECISION_TASKS:
        task = tasks.load(name)
        checks = pool_inputs.stress_checks(task)
        plain = len(task.test_sizes)
        assert checks[plain:] == tuple((plain - 2, s) for s in pool_inputs.STRESS_SCALES), name
        assert pool_inputs.stress_checks(dataclasses.replace(task, stress=False)) == checks[:plain]


def test_bfloat16_inputs_are_scaled_and_rounded_to_bfloat16():
    x = np.array([1.0, 3.0, -0.7], F32).astype(BF16)
    for scale in pool_inputs.STRESS_SCALES:
        out = pool_inputs.scaled({"x": x}, scale)["x"]
        assert out.dtype == np.dtype(BF16)
        want = (x.astype(np.float64) * scale).astype(BF16)  # one rounding of the exact product
        assert np.array_equal(out.astype(np.float64), want.astype(np.float64)), (scale, out, want)


@pytest.mark.parametrize("scale", pool_inputs.STRESS_SCALES)
@pytest.mark.parametrize("name", LOW_PRECISION_TASKS)
def test_honest_bfloat16_passes_and_cheats_fail_at_the_stress_scales(name, scale):
    task = tasks.load(name)
    module = tasks.functions(task)
    size = dict(task.test_sizes[pool_inputs.stress_checks(task)[-1][0]])
    outputs = {a.name: a.dtype for a in task.outputs}
    ins, expected = pool_inputs.make_content(task, module, outputs, size, np.random.default_rng(1), scale)
    drawn = module.make_inputs(dict(size), np.random.default_rng(1))  # the same draw, unscaled
    (out, exp), = expected.items()
    ok, _, detail = compare(out, honest(name, ins), exp)
    assert ok, f"{name} x{scale:g}: {detail}"
    ref = exp.value.astype(np.float64)
    cheats = {"zeros": np.zeros_like(ref), "5% off": ref * 1.05,
              "the answer for the inputs as drawn": np.asarray(module.reference(drawn, dict(size))[out])}
    for how, got in cheats.items():
        assert not compare(out, got.astype(BF16), exp)[0], f"{name} x{scale:g}: {how} passed"
