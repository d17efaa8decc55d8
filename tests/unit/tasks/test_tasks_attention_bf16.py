"""Tolerances of the bfloat16 attention tasks (attention_bf16, attention_bf16_causal), pinned by a
NumPy emulation of a FlashAttention-2 style kernel against their rules (fsr.dtypes.bounds: fsr's
default for bfloat16 outputs, rtol 1e-2 with a magnitude floor; 1.5e-2 for the causal task, whose
first queries average a few values, where P's rounding does not average out): float32 scores, an online softmax over key
tiles in float32 (exp2f with log2(e) folded into the scale, a few ulp of error), the probabilities
rounded to bfloat16 before P V, float32 sums of P V, o rounded once, stay well inside it at every
test size and over the bench size's 4096 keys; running sums of P V in float16 or bfloat16, q and
k read through fp8 (e4m3), and zeros fail by a wide factor over 4096 keys. Both tasks' .cu files
also compile for sm_80 (test_templates.py compiles every task for sm_90).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fsr import candidate, dtypes, tasks
from tests.support.precision import CHEAT_MIN, load, make
from tests.support.templates import check_all, combinations

F32 = np.float32
BF16 = ml_dtypes.bfloat16
D = 128
TASKS = ("attention_bf16", "attention_bf16_causal")
HONEST_MAX = 0.7  # o's rounding alone takes 0.39 of the tolerance, P's rounding up to 0.25 more
BENCH_ROWS = 64  # query rows of the bench size emulated (the last ones: all 4096 keys in reach)


def ratio(got: np.ndarray, ref: np.ndarray, task) -> float:
    """Worst |got - ref| / bound, got converted to float64 first: at most 1 passes fsr's check."""
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(np.asarray(got).astype(np.float64) - ref) / dtypes.bounds(ref, tasks.tolerance(task))))


def through(v: np.ndarray, kind) -> np.ndarray:
    """v rounded to `kind` and back to float32 (fp8 saturating, as kernels' converts do)."""
    top = float(ml_dtypes.finfo(kind).max)
    return np.clip(v, -top, top).astype(kind).astype(F32)


def flash(q, k, v, causal: bool, block_n: int = 64, rng=None, weights_rounded: bool = False,
          running=None, step: int = 16, qk_through=None) -> np.ndarray:
    """A FlashAttention-2 forward in float32 over key tiles of block_n: scores (q k^T) scale
    log2(e) / sqrt(128), running max m, p = exp2(s - m) (2 ulp of noise with rng), l the sum of
    p as computed or as rounded to bfloat16 (weights_rounded), O += bf16(p) V in float32, or
    rounded to `running` after every `step` keys (an accumulator of lower precision); o = O / l
    rounded once. q may be the last rows of the queries (the causal mask is aligned to the end)."""
    q, k, v = (a.astype(F32) for a in (q, k, v))
    if qk_through is not None:
        q, k = through(q, qk_through), through(k, qk_through)
    bh, rows, keys = q.shape[0], q.shape[1], k.shape[1]
    scale = F32(np.log2(np.e) / np.sqrt(D))
    m = np.full((bh, rows, 1), -np.inf, F32)
    total, o = np.zeros((bh, rows, 1), F32), np.zeros((bh, rows, D), F32)  # l and O
    query = np.arange(rows)[:, None] + (keys - rows)
    for j0 in range(0, keys, block_n):
        s = (q.astype(np.float64) @ k[:, j0:j0 + block_n].astype(np.float64).transpose(0, 2, 1)).astype(F32) * scale
        if causal:
            s = np.where(np.arange(j0, j0 + s.shape[2])[None, :] > query, F32(-np.inf), s)
        new = np.maximum(m, s.max(axis=2, keepdims=True))
        corr = np.exp2(m - new).astype(F32)  # 0 at the first tile (m = -inf)
        p = np.exp2((s - new).astype(F32)).astype(F32)
        if rng is not None:
            p = (p * (1 + rng.uniform(-2, 2, p.shape) * 2.0**-24)).astype(F32)
        pr = p.astype(BF16).astype(F32)
        total = (total * corr + (pr if weights_rounded else p).sum(axis=2, keepdims=True, dtype=F32)).astype(F32)
        o = (o * corr).astype(F32)
        stride = step if running is not None else block_n
        for t in range(0, pr.shape[2], stride):
            part = pr[:, :, t:t + stride].astype(np.float64) @ v[:, j0 + t:j0 + t + stride].astype(np.float64)
            o = (o + part).astype(F32)
            if running is not None:
                o = o.astype(running).astype(F32)
        m = new
    return (o / total).astype(F32).astype(BF16)


def bench_slice(name: str):
    """4 heads of the bench size's 4096 keys, the last BENCH_ROWS queries, and their reference."""
    task, fn = load(name)
    size = dict(task.bench_size) | {"bh": 4}
    inputs = fn.make_inputs(size, np.random.default_rng(0))
    inputs["q"] = inputs["q"][:, -BENCH_ROWS:]
    return task, inputs, fn.reference({k: v.copy() for k, v in inputs.items()}, size)


def loaded(name: str):
    try:
        return tasks.load(name)
    except tasks.TaskError as e:
        pytest.fail(f"{name} does not load: {e}")


@pytest.mark.parametrize("name, rtol", [("attention_bf16", dtypes.HALF_RTOL), ("attention_bf16_causal", 1.5e-2)])
def test_attention_bf16_tasks_are_relative_with_the_bfloat16_floor(name, rtol):
    task = loaded(name)
    assert all(a.dtype == "bfloat16" for a in task.args)
    assert (task.atol, task.rtol, task.floor) == (0.0, rtol, dtypes.DEFAULT_FLOOR)
    assert [a.shape[-1] for a in task.args] == ["128"] * 4


@pytest.mark.parametrize("name", TASKS)
def test_honest_float32_flash_attention_passes_with_room_at_every_size(name):
    task = loaded(name)
    causal = name.endswith("causal")
    cases = [make(name, dict(size)) for size in task.test_sizes] + [bench_slice(name)]
    if causal:  # the bench size's first 256 queries in its 128 heads: as a causal problem of 256
        cases.append(make(name, {"bh": dict(task.bench_size)["bh"], "seq": 256}))
    worst = 0.0
    for task, inputs, ref in cases:
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        rng = np.random.default_rng(1)
        for block_n, rounded in ((64, False), (32, True)):
            got = flash(q, k, v, causal, block_n, rng, weights_rounded=rounded)
            r = ratio(got, ref["o"], task)
            assert r <= HONEST_MAX, f"{q.shape} block_n={block_n} weights_rounded={rounded}: {r:.2f}"
            worst = max(worst, r)
    assert worst > 0.3  # o is rounded to bfloat16: a check that saw nothing would read 0


@pytest.mark.parametrize("name", TASKS)
def test_lower_precision_sums_fp8_scores_and_zeros_fail_over_4096_keys(name):
    task, inputs, ref = bench_slice(name)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    causal = name.endswith("causal")
    cheats = {
        "float16 running sums, every key": flash(q, k, v, causal, running=np.float16, step=1),
        "bfloat16 running sums, every k16 step": flash(q, k, v, causal, running=BF16, step=16),
        "e4m3 q and k": flash(q, k, v, causal, qk_through=ml_dtypes.float8_e4m3fn),
        "zeros": np.zeros(ref["o"].shape, BF16),
    }
    for what, got in cheats.items():
        assert ratio(got, ref["o"], task) >= CHEAT_MIN, what


@pytest.mark.parametrize("name", TASKS)
def test_the_reference_is_chunked_and_matches_unchunked_attention(name, monkeypatch):
    task, fn = load(name)
    size = {"bh": 3, "seq": 333}
    inputs = fn.make_inputs(size, np.random.default_rng(0))
    whole = fn.reference(inputs, size)["o"]
    monkeypatch.setattr(fn, "SCORES", 1000)  # fewer scores than one head's: blocks of query rows
    assert np.allclose(fn.reference(inputs, size)["o"], whole, rtol=1e-12, atol=1e-12)
    q, k, v = (inputs[n].astype(np.float64) for n in ("q", "k", "v"))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(D)
    if name.endswith("causal"):
        s[:, np.triu(np.ones((333, 333), bool), 1)] = -np.inf
    p = np.exp(s - s.max(axis=2, keepdims=True))
    assert np.allclose(whole, p @ v / p.sum(axis=2, keepdims=True), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("source", ["baseline", "template"])
def test_the_kernels_compile_for_sm_80_at_every_combination(name, source, monkeypatch):
    from tests.support import templates

    task = loaded(name)
    cand = candidate.parse(getattr(task, f"{source}_source"), task)
    monkeypatch.setattr(templates, "ARCH", "sm_80")
    monkeypatch.setattr(templates, "SMEM_PER_BLOCK_OPTIN", 163 * 1024)  # sm_80's opt-in most
    # WGMMA is sm_90a's own path: elsewhere its #error stops the compile with the reason
    # (test_gemm_wgmma.py); every other combination is the mma.sync kernel, which sm_80 runs.
    combos = [values for values in combinations(cand) if not values.get("WGMMA")]
    assert source == "baseline" or len(combos) < len(combinations(cand))
    check_all(task, cand, combos)
