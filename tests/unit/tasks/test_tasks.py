"""The built-in tasks: they load, their inputs make outputs that vary, their sizes cover the edge
cases, and their tolerances pass honest float32 arithmetic while failing reduced precision.

The tolerance tests emulate kernels in NumPy: honest float32 ones (sequential sums, strided
partial sums with a tree, Welford, FMA or not, exp and rsqrt with a few ulp of error) must stay
well inside atol + rtol * |ref| at every test size and at the bench size's row length or depth;
kernels that round inputs or outputs to bf16, fp16 or TF32 must fail by a wide factor.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from fsr import expr, tasks
from tests.support.precision import (
    CHEAT_MIN,
    F32,
    HONEST_MAX,
    bf16,
    fp16,
    load,
    make,
    ratio,
    seq_sum,
    strided_tree_sum,
    tf32,
    ulp_noise,
)

TASKS = tuple(tasks.list_tasks())  # every built-in task; per-task tolerance tests below
# ---- loading and inputs ----------------------------------------------------------------------

def test_the_built_in_tasks_are_listed():
    assert set(TASKS) <= set(tasks.list_tasks())


@pytest.mark.parametrize("name", TASKS)
def test_task_loads_with_baseline_template_and_library(name):
    task = tasks.load(name)
    assert task.baseline_source and task.template_source
    assert task.has_library
    assert task.rtol > 0 and (task.atol > 0 or task.floor > 0)  # absolute, or relative with a floor
    assert task.bench_size not in task.test_sizes
    bench = dict(task.bench_size)
    assert expr.evaluate(task.bytes_expr, bench) > 0 and expr.evaluate(task.flops_expr, bench) > 0


def test_roofline_counts_are_the_fewest_bytes_and_the_flops():
    sgemm = tasks.load("sgemm")
    size = {"M": 3, "N": 5, "K": 7}
    assert tasks.bytes_moved(sgemm, size) == 4 * (3 * 7 + 7 * 5 + 3 * 5)
    assert tasks.flops(sgemm, size) == 2 * 3 * 5 * 7
    layernorm = tasks.load("layernorm")
    assert tasks.bytes_moved(layernorm, {"rows": 2, "cols": 10}) == 4 * (2 * 2 * 10 + 2 * 10)


def test_layernorm_eps_is_one_constant_for_kernels_and_reference():
    task, fn = load("layernorm")
    assert dict(task.constants) == {"eps": pytest.approx(fn.EPS)}


@pytest.mark.parametrize("name", TASKS)
def test_outputs_vary_and_are_finite_at_every_test_size(name):
    task, fn = load(name)
    for size in task.test_sizes:
        sizes = dict(size)
        inputs = fn.make_inputs(sizes, np.random.default_rng(1))
        for arg in task.inputs:
            assert inputs[arg.name].dtype == np.dtype(arg.dtype)
            assert inputs[arg.name].shape == tasks.shape_of(task, arg, sizes)
        out = fn.reference(inputs, sizes)
        for arg in task.outputs:
            y = np.asarray(out[arg.name])
            assert y.shape == tasks.shape_of(task, arg, sizes) and np.isfinite(y).all(), (name, sizes)
            if min(sizes.values()) >= 2:  # a 1-wide softmax row is 1 whatever the input
                spread = y.std() / (np.abs(y).mean() + 1e-30)
                assert spread > 0.05, f"{name} at {sizes}: outputs nearly constant (spread {spread:.3g})"


@pytest.mark.parametrize("name", TASKS)
def test_inputs_differ_between_draws(name):
    task, fn = load(name)
    size = dict(task.test_sizes[2])
    a = fn.make_inputs(size, np.random.default_rng(1))
    b = fn.make_inputs(size, np.random.default_rng(2))
    assert all(not np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", TASKS)
def test_test_sizes_include_tiny_odd_and_large(name):
    task = tasks.load(name)
    sizes = [dict(s) for s in task.test_sizes]
    assert any(all(v == 1 for v in s.values()) for s in sizes), "a 1 x 1 (x 1) size"
    assert any(all(v % 2 == 1 and v > 1 for v in s.values()) for s in sizes), "an all-odd size"
    # large: sizes that multiply to 2^20 or more, or a buffer of 2^20 elements or more (the sizes
    # of a task with a literal dimension, such as attention's 64, multiply to less)
    largest = [max(np.prod(tasks.shape_of(task, a, s), dtype=np.int64) for a in task.args) for s in sizes]
    products = [np.prod(list(s.values()), dtype=np.int64) for s in sizes]
    assert max(largest) >= 2**20 or max(products) >= 2**20, "a large size"


def test_sgemm_sizes_leave_partial_tiles_on_every_dimension():
    sizes = [dict(s) for s in tasks.load("sgemm").test_sizes]
    for dim in ("M", "N", "K"):
        assert any(s[dim] > 16 and s[dim] % 16 for s in sizes), f"{dim}: a size that is no multiple of 16"
    for dim in ("N", "K"):  # these decide the float4 paths: 4 divides them, 8 does not
        assert any(s[dim] % 4 == 0 and s[dim] % 8 for s in sizes), f"{dim}: a multiple of 4 only"
    assert any(s["K"] >= 4096 for s in sizes), "a long K: float32 error at the bench depth"


@pytest.mark.parametrize("name", TASKS)
def test_reference_work_per_evaluation_stays_small(name):
    # On the GPU host the budget is 0.3 s for every test size together; a slow CI machine
    # gets three times that. The work is this process's CPU time, not the wall clock: other
    # processes on a busy host (a parallel test run) stretch the wall, not the work.
    # The smaller of two passes: BLAS threads that wait by spinning count as this process's time,
    # and wait longer the busier the host (0.21 s quiet, 0.91 s at a load of 8 for attention_bf16).
    task, fn = load(name)
    rng = np.random.default_rng(0)
    inputs = [(dict(size), fn.make_inputs(dict(size), rng)) for size in task.test_sizes]
    passes = []
    for _ in range(2):
        start = time.process_time()
        for size, made in inputs:
            fn.reference(made, size)
        passes.append(time.process_time() - start)
    assert min(passes) < 0.9, f"{name}: float64 references take {min(passes):.2f} CPU s per evaluation"


# ---- tolerances: softmax ---------------------------------------------------------------------

def softmax_f32(x: np.ndarray, fast: bool, block: bool, rng) -> np.ndarray:
    """A float32 softmax: expf (1 ulp) or __expf (exp2 of a rounded x * log2 e, 2 ulp), a
    sequential or a block-strided sum, a division or a reciprocal."""
    d = (x - x.max(axis=1, keepdims=True)).astype(F32)
    if fast:
        e = ulp_noise(np.exp2((d * F32(1.4426950408889634)).astype(F32).astype(np.float64)).astype(F32), 2, rng)
    else:
        e = ulp_noise(np.exp(d.astype(np.float64)).astype(F32), 1, rng)
    s = strided_tree_sum(e) if block else seq_sum(e)
    return (e * (F32(1) / s)).astype(F32) if fast else (e / s).astype(F32)


def softmax_cases():
    task = tasks.load("softmax")
    bench_row = {"rows": 64, "cols": dict(task.bench_size)["cols"]}
    return [dict(s) for s in task.test_sizes] + [bench_row]


@pytest.mark.parametrize("size", softmax_cases(), ids=lambda s: f"{s['rows']}x{s['cols']}")
def test_softmax_tolerance_passes_honest_float32(size):
    task, inputs, ref = make("softmax", size)
    rng = np.random.default_rng(0)
    for fast in (False, True):
        for block in (False, True):
            r = ratio(softmax_f32(inputs["x"], fast, block, rng), ref["y"], task)
            assert r <= HONEST_MAX, f"fast={fast} block={block}: {r:.3f} of the tolerance"


@pytest.mark.parametrize("size", [{"rows": 129, "cols": 4099}, {"rows": 64, "cols": 8192}])
def test_softmax_tolerance_fails_half_precision(size):
    task, inputs, ref = make("softmax", size)
    fn = tasks.functions(task)
    y = ref["y"].astype(F32)
    cheats = {
        "bf16 inputs": fn.reference({"x": bf16(inputs["x"])}, size)["y"],
        "fp16 inputs": fn.reference({"x": fp16(inputs["x"])}, size)["y"],
        "bf16 outputs": bf16(y),
        "fp16 outputs": fp16(y),
    }
    for what, got in cheats.items():
        assert ratio(np.asarray(got, F32), ref["y"], task) >= CHEAT_MIN, what


# ---- tolerances: sgemm -----------------------------------------------------------------------

def sgemm_sequential(a: np.ndarray, b: np.ndarray, fma: bool) -> np.ndarray:
    """One float32 accumulator per output, k in order; products rounded first unless fma."""
    acc = np.zeros((a.shape[0], b.shape[1]), F32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for k in range(a.shape[1]):
        if fma:
            acc = (acc + a64[:, k, None] * b64[None, k, :]).astype(F32)
        else:
            acc = (acc + a[:, k, None] * b[None, k, :]).astype(F32)
    return acc


def sgemm_cases():
    task = tasks.load("sgemm")
    deep = {"M": 64, "N": 64, "K": dict(task.bench_size)["K"]}
    return [dict(s) for s in task.test_sizes] + [deep]


@pytest.mark.parametrize("size", sgemm_cases(), ids=lambda s: f"{s['M']}x{s['N']}x{s['K']}")
def test_sgemm_tolerance_passes_honest_float32(size):
    task, inputs, ref = make("sgemm", size)
    a, b = inputs["A"], inputs["B"]
    assert ratio(a @ b, ref["C"], task) <= HONEST_MAX  # blocked BLAS order
    if size["M"] * size["N"] <= 64 * 64:  # the worst order is slow to emulate on big outputs
        for fma in (False, True):
            assert ratio(sgemm_sequential(a, b, fma), ref["C"], task) <= HONEST_MAX, f"fma={fma}"


def tf32_split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The template's TF32X3 split: high = x rounded to TF32 (adding half a TF32 ulp to the bits,
    then dropping the 13 low ones), low = x - high (exact) rounded the same way."""
    def rnd(v):
        u = np.ascontiguousarray(v, F32).view(np.uint32)
        return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(F32)

    high = rnd(x)
    return high, rnd((x - high).astype(F32))


def sgemm_split_tf32(a: np.ndarray, b: np.ndarray, cross_terms: int = 2) -> np.ndarray:
    """The template's TF32X3: per 8-deep k step, low(a) high(b) + high(a) low(b) + high(a) high(b)
    summed afresh (exact products of TF32 values, rounded once to float32), then added to the
    float32 accumulator; cross_terms=1 drops low(a) high(b)."""
    (ah, al), (bh, bl) = tf32_split(a), tf32_split(b)
    ah, al, bh, bl = (v.astype(np.float64) for v in (ah, al, bh, bl))
    acc = np.zeros((a.shape[0], b.shape[1]), F32)
    for k in range(0, a.shape[1], 8):
        s = slice(k, k + 8)
        step = ah[:, s] @ bh[s] + ah[:, s] @ bl[s] + (al[:, s] @ bh[s] if cross_terms == 2 else 0.0)
        acc = (acc + step.astype(F32)).astype(F32)
    return acc


@pytest.mark.parametrize("size", sgemm_cases(), ids=lambda s: f"{s['M']}x{s['N']}x{s['K']}")
def test_sgemm_tolerance_passes_split_tf32(size):
    task, inputs, ref = make("sgemm", size)
    assert ratio(sgemm_split_tf32(inputs["A"], inputs["B"]), ref["C"], task) <= HONEST_MAX


@pytest.mark.parametrize("size", [{"M": 1024, "N": 1024, "K": 1024}, {"M": 127, "N": 129, "K": 255},
                                  {"M": 64, "N": 64, "K": 4096}], ids=lambda s: f"{s['M']}x{s['N']}x{s['K']}")
def test_sgemm_tolerance_fails_tf32_and_half_precision(size):
    task, inputs, ref = make("sgemm", size)
    a, b = inputs["A"], inputs["B"]
    for what, rnd in {"tf32": tf32, "fp16": fp16, "bf16": bf16}.items():
        assert ratio(rnd(a) @ rnd(b), ref["C"], task) >= CHEAT_MIN, what
    # split TF32 with one cross term dropped is TF32 on A: no better than the check allows
    assert ratio(sgemm_split_tf32(a, b, cross_terms=1), ref["C"], task) >= CHEAT_MIN


# ---- tolerances: layernorm -------------------------------------------------------------------

def layernorm_f32(x, w, b, variance: str, rng) -> np.ndarray:
    """A float32 layer norm: mean and variance by two sequential passes, by a block's strided
    sums, or by sequential Welford; rsqrtf (2 ulp); (x - mean) * rstd * w + b."""
    n = F32(x.shape[1])
    if variance == "welford":
        mean = np.zeros((x.shape[0], 1), F32)
        m2 = np.zeros((x.shape[0], 1), F32)
        for c in range(x.shape[1]):
            v = x[:, c:c + 1]
            d = (v - mean).astype(F32)
            mean = (mean + d / F32(c + 1)).astype(F32)
            m2 = (m2 + d * (v - mean)).astype(F32)
        var = (m2 / n).astype(F32)
    else:
        total = strided_tree_sum if variance == "block" else seq_sum
        mean = (total(x) / n).astype(F32)
        var = (total(((x - mean) ** 2).astype(F32)) / n).astype(F32)
    rstd = ulp_noise(F32(1) / np.sqrt((var + F32(1e-5)).astype(F32)), 2, rng)
    return (((x - mean).astype(F32) * rstd).astype(F32) * w + b).astype(F32)


def layernorm_cases():
    task = tasks.load("layernorm")
    bench_row = {"rows": 64, "cols": dict(task.bench_size)["cols"]}
    return [dict(s) for s in task.test_sizes] + [bench_row]


@pytest.mark.parametrize("size", layernorm_cases(), ids=lambda s: f"{s['rows']}x{s['cols']}")
def test_layernorm_tolerance_passes_honest_float32(size):
    task, inputs, ref = make("layernorm", size)
    rng = np.random.default_rng(0)
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    kinds = ("two-pass", "block") + (("welford",) if x.size <= 2**20 else ())
    for kind in kinds:
        r = ratio(layernorm_f32(x, w, b, kind, rng), ref["y"], task)
        assert r <= HONEST_MAX, f"{kind}: {r:.3f} of the tolerance"


@pytest.mark.parametrize("size", [{"rows": 129, "cols": 4099}, {"rows": 64, "cols": 8192}])
def test_layernorm_tolerance_fails_half_precision(size):
    task, inputs, ref = make("layernorm", size)
    fn = tasks.functions(task)
    y = ref["y"].astype(F32)
    cheats = {
        "bf16 inputs": fn.reference({k: bf16(v) for k, v in inputs.items()}, size)["y"],
        "fp16 x": fn.reference(dict(inputs, x=fp16(inputs["x"])), size)["y"],
        "bf16 outputs": bf16(y),
        "fp16 outputs": fp16(y),
    }
    for what, got in cheats.items():
        assert ratio(np.asarray(got, F32), ref["y"], task) >= CHEAT_MIN, what


def test_a_task_without_baseline_loads_with_an_empty_baseline(tmp_path):
    import shutil

    folder = tmp_path / "nobase"
    shutil.copytree(tasks.tasks_dir() / "softmax", folder)
    (folder / "baseline.cu").unlink()
    (folder / "template.cu").unlink()
    task = tasks.load(folder)
    assert task.baseline_source == "" and task.template_source is None
    (folder / "template.cu").write_text("not a candidate")
    with pytest.raises(tasks.TaskError, match="template.cu"):
        tasks.load(folder)


def returns_a_value(function_source: str) -> bool:
    """Whether the function's body returns something on its last line (the op's outputs)."""
    import ast
    import textwrap

    body = ast.parse(textwrap.dedent(function_source)).body[0].body  # type: ignore[attr-defined]
    return isinstance(body[-1], ast.Return) and body[-1].value is not None


@pytest.mark.parametrize("name", tasks.list_tasks())
def test_torch_eager_returns_the_ops_outputs_so_torch_compile_keeps_the_work(name):
    """torch.compile drops computations whose results are unused: a torch_eager that returns
    nothing would be timed compiled as an empty call (0.01x readings)."""
    import inspect

    functions = tasks.functions(tasks.load(name))
    assert functions.torch_eager is not None
    assert returns_a_value(inspect.getsource(functions.torch_eager)), f"{name}: torch_eager returns nothing"


def test_the_return_check_rejects_a_torch_eager_that_discards_its_result():
    assert not returns_a_value("def torch_eager(inputs, sizes):\n    import torch\n\n    torch.softmax(x, dim=1)\n")
    assert returns_a_value("def torch_eager(inputs, sizes):\n    return torch.softmax(x, dim=1)\n")
