"""Stress-check tolerances (fsr.evaluate.gpu.inputs.error_growth), without a GPU: at the stress
size of every task with float inputs (its second largest test size), inputs scaled by 1e-3 and 64,
NumPy emulations of honest float32 kernels (the orders the baselines and templates use: one
thread's sequential loop, block-strided sums, online softmax, FMA or not, libm or fast
intrinsics) pass, while an output of zeros, the answer for the inputs as drawn (a kernel that
ignores the scale) and the true answer 1% off fail. Attention's scores grow 64^2 times at x64,
so its softmax is peaked and a float32 score's rounding moves the output far more than the
output's magnitude grew: the tolerance follows that growth (an H100 judged the honest baseline
WRONG when atol only scaled with the output's RMS)."""

from __future__ import annotations

import numpy as np
import pytest

from fsr import tasks
from fsr.evaluate.gpu import inputs as pool_inputs
from fsr.evaluate.gpu.verify import compare
from tests.unit.test_tasks import layernorm_f32, sgemm_sequential, softmax_f32
from tests.unit.test_tasks_ai import (
    attention_f32,
    cross_entropy_f32,
    gelu_f32,
    gemv_sequential,
    rmsnorm_f32,
    sum_middle_f32,
)
from tests.unit.test_tasks_algo import jacobi_f32, nbody_f32, spmv_f32

F32 = np.float32


def attention_baseline_f32(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """tasks/attention/baseline.cu in float32: per query row, each score a sequential FMA loop
    over d, then / 8; expf of the score less the row's max; the weights and p v summed key by
    key in order; one division at the end."""
    o = np.empty(q.shape, F32)
    for h in range(q.shape[0]):
        s = np.zeros((q.shape[1], k.shape[1]), F32)
        for d in range(q.shape[2]):  # fma: the product exact, one rounding per step
            s = (s + q[h, :, d, None].astype(np.float64) * k[h, None, :, d]).astype(F32)
        s = (s / F32(8)).astype(F32)
        p = np.exp((s - s.max(axis=1, keepdims=True)).astype(F32)).astype(F32)
        total = np.cumsum(p, axis=1, dtype=F32)[:, -1:]
        acc = np.zeros((q.shape[1], v.shape[2]), F32)
        for j in range(k.shape[1]):
            acc = (acc + p[:, j, None].astype(np.float64) * v[h, j]).astype(F32)
        o[h] = (acc / total).astype(F32)
    return o


def honest(name: str, ins: dict[str, np.ndarray], size: dict[str, int], rng) -> dict[str, np.ndarray]:
    """Float32 emulations of `name`'s kernels on `ins` (nbody: the first 64 targets only)."""
    fn = tasks.functions(tasks.load(name))
    if name == "attention":
        q, k, v = ins["q"], ins["k"], ins["v"]
        return {"baseline": attention_baseline_f32(q, k, v)} | {
            f"online={on} fast={fast}": attention_f32(q, k, v, on, fast, rng) for on in (False, True)
            for fast in (False, True)}
    runs = {
        "cross_entropy": lambda: {f"fast={f} block={b}": cross_entropy_f32(ins["logits"], ins["target"], f, b, rng)
                                  for f in (False, True) for b in (False, True)},
        "gelu": lambda: {f"fast={f}": gelu_f32(ins["x"], f, rng) for f in (False, True)},
        "gemv": lambda: {f"fma={f}": gemv_sequential(ins["A"], ins["x"], f) for f in (False, True)},
        "jacobi2d": lambda: {o: jacobi_f32(ins["u"], o) for o in ("pairs", "sequential", "fma")},
        "layernorm": lambda: {o: layernorm_f32(ins["x"], ins["weight"], ins["bias"], o, rng)
                              for o in ("two-pass", "block", "welford")},
        "maxpool2d": lambda: {"exact": fn.reference(dict(ins), size)["y"].astype(F32)},  # a max is an input
        "nbody": lambda: {f"split={s}": nbody_f32(ins["targets"][:64], ins["sources"], s, rng, fn.EPS2)
                          for s in (1, 8)},
        "rmsnorm": lambda: {f"block={b}": rmsnorm_f32(ins["x"], ins["weight"], b, rng) for b in (False, True)},
        "sgemm": lambda: {f"fma={f}": sgemm_sequential(ins["A"], ins["B"], f) for f in (False, True)},
        "softmax": lambda: {f"fast={f} block={b}": softmax_f32(ins["x"], f, b, rng)
                            for f in (False, True) for b in (False, True)},
        "spmv_csr": lambda: {f"lanes={n}": spmv_f32(ins, size["rows"], n) for n in (1, 4, 32)},
        "sum_middle": lambda: {o: sum_middle_f32(ins["x"], o) for o in ("sequential", "strided", "split")},
        "transpose": lambda: {"exact": np.ascontiguousarray(ins["x"].T)},
    }
    return runs[name]()


# float32 tasks with stress checks (the low-precision ones: tests/unit/test_stress_low_precision.py)
FLOAT_TASKS = [n for n in tasks.list_tasks()
               if pool_inputs.stress_checks(task := tasks.load(n))[-1][1] != 1.0 and task.dtype == "float32"]


def stress(name: str, scale: float):
    """The stress item of `name` at `scale` as the GPU child makes it; the drawn inputs too."""
    task = tasks.load(name)
    module = tasks.functions(task)
    size = dict(task.test_sizes[pool_inputs.stress_checks(task)[-1][0]])
    dtypes = {a.name: a.dtype for a in task.outputs}
    ins, expected = pool_inputs.make_content(task, module, dtypes, size, np.random.default_rng(1), scale)
    drawn = module.make_inputs(dict(size), np.random.default_rng(1))  # the same draw, unscaled
    return size, ins, expected, module.reference(drawn, dict(size))


def part(name: str, expected, out: str):
    """The expected output `out`, cut as the emulation computes it (nbody: 64 targets)."""
    if name != "nbody":
        return expected
    return type(expected)(expected.value[:64], expected.bound[:64])


def test_every_task_with_float_inputs_is_emulated():
    assert sorted(FLOAT_TASKS) == ["attention", "cross_entropy", "gelu", "gemv", "jacobi2d", "layernorm",
                                   "maxpool2d", "nbody", "rmsnorm", "sgemm", "softmax", "spmv_csr",
                                   "sum_middle", "transpose"]


@pytest.mark.parametrize("scale", pool_inputs.STRESS_SCALES)
@pytest.mark.parametrize("name", FLOAT_TASKS)
def test_honest_float32_passes_and_cheats_fail_at_the_stress_scales(name, scale):
    size, ins, expected, unscaled = stress(name, scale)
    (out, exp), = expected.items()
    exp = part(name, exp, out)
    for how, got in honest(name, ins, size, np.random.default_rng(0)).items():
        ok, _, detail = compare(out, np.asarray(got, F32), exp)
        assert ok, f"{name} x{scale:g} {how}: {detail}"
    ref = exp.value.astype(np.float64)
    cheats = {"zeros": np.zeros_like(exp.value), "1% off": ref * 1.01,
              "the answer for the inputs as drawn": np.asarray(unscaled[out])[:len(ref)]}
    for how, got in cheats.items():
        assert not compare(out, np.asarray(got, F32), exp)[0], f"{name} x{scale:g}: {how} passed"


def test_the_attention_baseline_passes_at_x64_where_an_h100_judged_it_wrong():
    """bh=2, seq=777, inputs x64: with atol scaled only as the output's RMS moved, the float32
    baseline erred by up to 17 times its bound (an H100: 127 of 99456 elements wrong)."""
    size, ins, expected, _ = stress("attention", 64.0)
    assert size == {"bh": 2, "seq": 777}
    got = attention_baseline_f32(ins["q"], ins["k"], ins["v"])
    ok, _, detail = compare("o", got, expected["o"])
    assert ok, detail


def test_the_tolerance_grows_with_conditioning_not_only_with_magnitude():
    """A linear op's stress atol moves as its output's RMS (sgemm: 64^2); attention's grows
    beyond its RMS's 64 fold, as its float32 error does, and stays far below its outputs."""
    task = tasks.load("sgemm")
    _, _, expected, _ = stress("sgemm", 64.0)
    ref = expected["C"].value.astype(np.float64)
    atol = float(np.min(expected["C"].bound - task.rtol * np.abs(ref)))
    assert atol == pytest.approx(task.atol * 4096, rel=0.01)
    attention = tasks.load("attention")
    _, _, expected, _ = stress("attention", 64.0)
    ref = expected["o"].value.astype(np.float64)
    atol = float(np.min(expected["o"].bound - attention.rtol * np.abs(ref)))
    assert attention.atol * 64 * 10 < atol < 0.01 * float(np.sqrt(np.mean(ref * ref)))
