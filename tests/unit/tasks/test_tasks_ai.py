"""Tolerances of the AI-workload tasks (gelu, rmsnorm, cross_entropy, gemv, sum_middle, transpose,
attention), pinned by NumPy emulations as in test_tasks.py: honest float32 kernels (any summation
order a kernel may use, FMA or not, libm or fast intrinsics) stay well inside the tolerance at
every test size and at the bench size's row length or depth; kernels that round inputs, outputs
or intermediate products to TF32, fp16 or bf16 fail by a wide factor.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.precision import (
    CHEAT_MIN,
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

F32 = np.float32
LOG2E = F32(1.4426950408889634)


def cases(name: str, **bench_part: int) -> list[dict[str, int]]:
    """Every test size, and a slice of the bench size (`bench_part` replaces its large sizes)."""
    task, _ = load(name)
    return [dict(s) for s in task.test_sizes] + [dict(task.bench_size) | bench_part]


def label(size: dict[str, int]) -> str:
    return "x".join(str(v) for v in size.values())


def fast_exp(v: np.ndarray, rng) -> np.ndarray:
    """__expf: exp2 of a rounded v * log2(e), with ex2.approx's 2 ulp (inf past float32's range)."""
    with np.errstate(over="ignore"):
        return ulp_noise(np.exp2((v * LOG2E).astype(F32).astype(np.float64)).astype(F32), 2, rng)


def libm_exp(v: np.ndarray, rng) -> np.ndarray:
    """expf: correctly rounded up to 1 ulp."""
    return ulp_noise(np.exp(v.astype(np.float64)).astype(F32), 1, rng)


def rounded(fn, inputs: dict[str, np.ndarray], size: dict[str, int], how) -> np.ndarray:
    """The float64 reference of inputs rounded by `how` (float inputs only)."""
    return next(iter(fn.reference({k: how(v) if v.dtype == F32 else v for k, v in inputs.items()}, size).values()))


def assert_cheats_fail(task, fn, inputs, ref, size, outputs: bool = True) -> None:
    cheats = {"bf16 inputs": rounded(fn, inputs, size, bf16), "fp16 inputs": rounded(fn, inputs, size, fp16)}
    if outputs:
        cheats |= {"bf16 outputs": bf16(ref.astype(F32)), "fp16 outputs": fp16(ref.astype(F32))}
    for what, got in cheats.items():
        assert ratio(np.asarray(got, F32), ref, task) >= CHEAT_MIN, what


# ---- gelu ------------------------------------------------------------------------------------

def gelu_f32(x: np.ndarray, fast: bool, rng) -> np.ndarray:
    """Float32 GELU: u = c * fma(k x, x^2, x); 0.5 x (1 + tanhf(u)) with tanhf's 2 ulp, or
    x / (1 + __expf(-2u))."""
    x64 = x.astype(np.float64)
    u = (F32(0.7978845608) * ((F32(0.044715) * x) * (x * x) + x64).astype(F32)).astype(F32)
    if fast:
        return (x / (F32(1) + fast_exp((F32(-2) * u).astype(F32), rng))).astype(F32)
    t = ulp_noise(np.tanh(u.astype(np.float64)).astype(F32), 2, rng)
    return (F32(0.5) * x * (F32(1) + t)).astype(F32)


@pytest.mark.parametrize("size", cases("gelu", n=1 << 20), ids=label)
def test_gelu_tolerance_passes_honest_float32(size):
    task, inputs, ref = make("gelu", size)
    rng = np.random.default_rng(0)
    for fast in (False, True):
        assert ratio(gelu_f32(inputs["x"], fast, rng), ref["y"], task) <= HONEST_MAX, f"fast={fast}"


def test_gelu_tolerance_fails_approximate_tanh_and_half_precision():
    size = {"n": 1 << 20}
    task, inputs, ref = make("gelu", size)
    fn = load("gelu")[1]
    x = inputs["x"].astype(np.float64)
    u = 0.7978845608028654 * (x + 0.044715 * x**3)
    rng = np.random.default_rng(0)
    approx = 0.5 * x * (1 + np.tanh(u) * (1 + rng.uniform(-1, 1, x.shape) * 2.0**-11))  # tanh.approx.f32
    assert ratio(approx.astype(F32), ref["y"], task) >= CHEAT_MIN
    assert_cheats_fail(task, fn, inputs, ref["y"], size)


# ---- rmsnorm ---------------------------------------------------------------------------------

def rmsnorm_f32(x: np.ndarray, w: np.ndarray, block: bool, rng) -> np.ndarray:
    """Float32 RMS norm: the sum of squares sequential or block-strided, rsqrtf (2 ulp)."""
    sq = (x * x).astype(F32)
    total = strided_tree_sum(sq) if block else seq_sum(sq)
    rstd = ulp_noise(F32(1) / np.sqrt((total / F32(x.shape[1]) + F32(1e-6)).astype(F32)), 2, rng)
    return ((x * rstd).astype(F32) * w).astype(F32)


@pytest.mark.parametrize("size", cases("rmsnorm", rows=64), ids=label)
def test_rmsnorm_tolerance_passes_honest_float32(size):
    task, inputs, ref = make("rmsnorm", size)
    rng = np.random.default_rng(0)
    for block in (False, True):
        got = rmsnorm_f32(inputs["x"], inputs["weight"], block, rng)
        assert ratio(got, ref["y"], task) <= HONEST_MAX, f"block={block}"


@pytest.mark.parametrize("size", [{"rows": 129, "cols": 4099}, {"rows": 64, "cols": 8192}], ids=label)
def test_rmsnorm_tolerance_fails_half_precision(size):
    task, inputs, ref = make("rmsnorm", size)
    assert_cheats_fail(task, load("rmsnorm")[1], inputs, ref["y"], size)


def test_rmsnorm_eps_is_one_constant_for_kernels_and_reference():
    task, fn = load("rmsnorm")
    assert dict(task.constants) == {"eps": pytest.approx(fn.EPS)}


# ---- cross_entropy ---------------------------------------------------------------------------

def cross_entropy_f32(x: np.ndarray, t: np.ndarray, fast: bool, block: bool, rng) -> np.ndarray:
    """Float32 loss = m + log(s) - x[t]: expf or __expf, a sequential or block-strided sum,
    logf or __logf (2 ulp)."""
    m = x.max(axis=1, keepdims=True)
    d = (x - m).astype(F32)
    e = fast_exp(d, rng) if fast else libm_exp(d, rng)
    s = strided_tree_sum(e) if block else seq_sum(e)
    log_s = ulp_noise(np.log(s.astype(np.float64)).astype(F32), 2 if fast else 1, rng)
    picked = x[np.arange(x.shape[0]), t][:, None]
    return ((m + log_s).astype(F32) - picked).astype(F32)[:, 0]


@pytest.mark.parametrize("size", cases("cross_entropy", rows=64), ids=label)
def test_cross_entropy_tolerance_passes_honest_float32(size):
    task, inputs, ref = make("cross_entropy", size)
    rng = np.random.default_rng(0)
    for fast in (False, True):
        for block in (False, True):
            got = cross_entropy_f32(inputs["logits"], inputs["target"], fast, block, rng)
            assert ratio(got, ref["loss"], task) <= HONEST_MAX, f"fast={fast} block={block}"


@pytest.mark.parametrize("size", [{"rows": 129, "classes": 4099}, {"rows": 64, "classes": 32000}], ids=label)
def test_cross_entropy_tolerance_fails_half_precision(size):
    task, inputs, ref = make("cross_entropy", size)
    assert_cheats_fail(task, load("cross_entropy")[1], inputs, ref["loss"], size)


def test_cross_entropy_targets_are_int64_classes_and_some_are_the_argmax():
    task, inputs, _ = make("cross_entropy", {"rows": 1000, "classes": 257})
    t = inputs["target"]
    assert t.dtype == np.int64 and t.min() >= 0 and t.max() < 257
    hits = (t == inputs["logits"].argmax(axis=1)).mean()
    assert 0.1 < hits < 0.5  # small losses are checked, and most rows are not the argmax


# ---- gemv ------------------------------------------------------------------------------------

def gemv_sequential(a: np.ndarray, x: np.ndarray, fma: bool) -> np.ndarray:
    """One float32 accumulator per row, columns in order; products rounded first unless fma."""
    acc = np.zeros(a.shape[0], F32)
    a64, x64 = a.astype(np.float64), x.astype(np.float64)
    for c in range(a.shape[1]):
        acc = (acc + a64[:, c] * x64[c]).astype(F32) if fma else (acc + a[:, c] * x[c]).astype(F32)
    return acc


@pytest.mark.parametrize("size", cases("gemv", M=64), ids=label)
def test_gemv_tolerance_passes_honest_float32(size):
    task, inputs, ref = make("gemv", size)
    a, x = inputs["A"], inputs["x"]
    assert ratio(a @ x, ref["y"], task) <= HONEST_MAX  # BLAS order
    assert ratio(strided_tree_sum((a * x).astype(F32))[:, 0], ref["y"], task) <= HONEST_MAX  # a block per row
    if a.shape[0] <= 128:  # the worst order is slow to emulate on many rows
        for fma in (False, True):
            assert ratio(gemv_sequential(a, x, fma), ref["y"], task) <= HONEST_MAX, f"fma={fma}"


@pytest.mark.parametrize("size", [{"M": 65, "N": 16384}, {"M": 64, "N": 16384}], ids=label)
def test_gemv_tolerance_fails_tf32_and_half_precision(size):
    task, inputs, ref = make("gemv", size)
    a, x = inputs["A"], inputs["x"]
    for what, rnd in {"tf32": tf32, "fp16": fp16, "bf16": bf16}.items():
        got = rnd(a).astype(np.float64) @ rnd(x).astype(np.float64)
        assert ratio(got, ref["y"], task) >= CHEAT_MIN, what


# ---- sum_middle ------------------------------------------------------------------------------

def sum_middle_f32(x: np.ndarray, order: str) -> np.ndarray:
    """Float32 sums over axis 1: sequential; 8 warps striding over b, then added in order; or 32
    blocks each summing a contiguous share of b, then the partials added in order."""
    if order == "sequential":
        return np.cumsum(x, axis=1, dtype=F32)[:, -1]
    parts = 8 if order == "strided" else 32
    b = x.shape[1]
    pad = np.concatenate([x, np.zeros((x.shape[0], (-b) % parts, x.shape[2]), F32)], axis=1)
    if order == "strided":  # row r of a part takes b = r, r + 8, ...
        partial = np.cumsum(pad.reshape(x.shape[0], -1, parts, x.shape[2]), axis=1, dtype=F32)[:, -1]
    else:  # part z takes a contiguous chunk
        partial = np.cumsum(pad.reshape(x.shape[0], parts, -1, x.shape[2]), axis=2, dtype=F32)[:, :, -1]
    return np.cumsum(partial, axis=1, dtype=F32)[:, -1]


@pytest.mark.parametrize("size", cases("sum_middle", A=2, C=256), ids=label)
def test_sum_middle_tolerance_passes_honest_float32(size):
    task, inputs, ref = make("sum_middle", size)
    for order in ("sequential", "strided", "split"):
        assert ratio(sum_middle_f32(inputs["x"], order), ref["y"], task) <= HONEST_MAX, order


@pytest.mark.parametrize("size", [{"A": 3, "B": 8192, "C": 64}, {"A": 4, "B": 1001, "C": 260}], ids=label)
def test_sum_middle_tolerance_fails_half_precision(size):
    task, inputs, ref = make("sum_middle", size)
    fn = load("sum_middle")[1]
    cheats = {"bf16 inputs": rounded(fn, inputs, size, bf16), "fp16 inputs": rounded(fn, inputs, size, fp16),
              "bf16 outputs": bf16(ref["y"].astype(F32))}
    for what, got in cheats.items():
        assert ratio(np.asarray(got, F32), ref["y"], task) >= CHEAT_MIN, what


# ---- transpose -------------------------------------------------------------------------------

def test_transpose_tolerance_passes_only_the_exact_transpose():
    task, inputs, ref = make("transpose", {"rows": 129, "cols": 4099})
    x = inputs["x"]
    assert ratio(np.ascontiguousarray(x.T), ref["y"], task) == 0.0
    assert_cheats_fail(task, load("transpose")[1], inputs, ref["y"], {"rows": 129, "cols": 4099})
    nudged = np.ascontiguousarray(x.T)
    nudged[5, 7] = np.nextafter(nudged[5, 7], F32(np.inf))  # one ulp off in one element
    assert ratio(nudged, ref["y"], task) > 1.0
    square = make("transpose", {"rows": 64, "cols": 64})
    assert ratio(square[1]["x"], square[2]["y"], square[0]) > 1.0  # a copy is no transpose


# ---- attention -------------------------------------------------------------------------------

def attention_f32(q: np.ndarray, k: np.ndarray, v: np.ndarray, online: bool, fast: bool, rng) -> np.ndarray:
    """Float32 attention per head: scores by a float32 matmul of q / 8 and k; softmax two-pass
    or online in chunks of 16 keys (rescaling when the max grows); p v accumulated in float32."""
    exp = fast_exp if fast else libm_exp
    out = np.empty(q.shape, F32)
    for h in range(q.shape[0]):
        s = ((q[h] * F32(0.125)) @ k[h].T).astype(F32)
        if not online:
            p = exp((s - s.max(axis=1, keepdims=True)).astype(F32), rng)
            out[h] = ((p @ v[h]).astype(F32) / seq_sum(p)).astype(F32)
            continue
        m = np.full((s.shape[0], 1), -np.inf, F32)
        acc = np.zeros((s.shape[0], v.shape[2]), F32)
        total = np.zeros((s.shape[0], 1), F32)
        for j in range(0, s.shape[1], 16):
            new = np.maximum(m, s[:, j:j + 16].max(axis=1, keepdims=True))
            corr = exp((m - new).astype(F32), rng)
            acc, total, m = (acc * corr).astype(F32), (total * corr).astype(F32), new
            p = exp((s[:, j:j + 16] - m).astype(F32), rng)
            acc = (acc + p @ v[h, j:j + 16]).astype(F32)
            total = (total + seq_sum(p)).astype(F32)
        out[h] = (acc / total).astype(F32)
    return out


def attention_cases() -> list[dict[str, int]]:
    return [s for s in cases("attention", bh=1) if s["bh"] * s["seq"] <= 4096]


@pytest.mark.parametrize("size", attention_cases(), ids=label)
def test_attention_tolerance_passes_honest_float32(size):
    task, inputs, ref = make("attention", size)
    rng = np.random.default_rng(0)
    for online in (False, True):
        for fast in (False, True):
            got = attention_f32(inputs["q"], inputs["k"], inputs["v"], online, fast, rng)
            assert ratio(got, ref["o"], task) <= HONEST_MAX, f"online={online} fast={fast}"


@pytest.mark.parametrize("size", [{"bh": 2, "seq": 1025}, {"bh": 3, "seq": 333}], ids=label)
def test_attention_tolerance_fails_tf32_and_half_precision(size):
    task, inputs, ref = make("attention", size)
    fn = load("attention")[1]
    tf32_scores = fn.reference(dict(inputs, q=tf32(inputs["q"]), k=tf32(inputs["k"])), size)["o"]
    assert ratio(np.asarray(tf32_scores, F32), ref["o"], task) >= CHEAT_MIN, "tf32 q k^T"
    assert_cheats_fail(task, fn, inputs, ref["o"], size)
