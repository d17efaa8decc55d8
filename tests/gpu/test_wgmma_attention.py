"""Hopper's path of the bf16 attention template on a real GPU (sm_90): with WGMMA on, Q, K and V
arrive by TMA into 128-byte-swizzled tiles and wgmma computes S = Q K^T (both operands in shared
memory) and O += P V (P from registers, V transposed). The template is judged OK at every test
size of attention_bf16 and attention_bf16_causal (the wgmma launch runs at all of them) at its
default tunables, at each switch (the FlashAttention-3 overlaps) and at each other tunable value;
the same code with a wrong copy coordinate, V's descriptor untransposed or its two strides
swapped, or the causal mask dropped is judged WRONG. The TFLOP/s at the bench size is printed
(`pytest -s`); bench/wgmma_probe.py prints them all side by side."""

from __future__ import annotations

import pytest

from fsr import candidate, tasks
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Verdict

pytestmark = pytest.mark.gpu
PLAIN = tasks.load("attention_bf16")
CAUSAL = tasks.load("attention_bf16_causal")

BROKEN = {
    # K's tile read at the query block's rows instead of the key tile's
    "coordinates": ("tma_rows(k, km, WG_BN, kt * WG_BN, head, WG_KFULL(bars, st));",
                    "tma_rows(k, km, WG_BN, m0, head, WG_KFULL(bars, st));"),
    # V read k-major, as if it were K (the transpose bit of P V's wgmma off)
    "transpose": ("{%64, %65, %66, %67}, %68, p, 1, 1, 1;", "{%64, %65, %66, %67}, %68, p, 1, 1, 0;"),
    # V's descriptor strides swapped (LBO between the two column halves, SBO between 8-key groups)
    "v descriptor": ("wg_desc(v + 2048 * kk, WG_BN * 128, 1024)", "wg_desc(v + 2048 * kk, 1024, WG_BN * 128)"),
}
VARIANTS = [(PLAIN, {"WG_OVERLAP": 1}), (PLAIN, {"WG_PINGPONG": 1}), (PLAIN, {"WG_OVERLAP": 1, "WG_PINGPONG": 1}),
            (CAUSAL, {"WG_OVERLAP": 1, "WG_PINGPONG": 1}), (CAUSAL, {"WG_OVERLAP": 1}),
            (PLAIN, {"WG_CONSUMERS": 1}), (CAUSAL, {"WG_CONSUMERS": 1, "WG_OVERLAP": 1}),
            (PLAIN, {"WG_BLOCK_N": 176, "WG_OVERLAP": 1, "WG_PINGPONG": 1}), (CAUSAL, {"WG_BLOCK_N": 176}),
            (PLAIN, {"WG_BLOCK_N": 64}), (CAUSAL, {"WG_BLOCK_N": 64, "WG_OVERLAP": 1, "WG_PINGPONG": 1}),
            (PLAIN, {"WG_STAGES": 2}), (CAUSAL, {"WG_STAGES": 3, "WG_BLOCK_N": 64, "WG_CONSUMERS": 1})]


def wgmma(task, values=None, source=None) -> candidate.Candidate:
    cand = candidate.parse(source or task.template_source, task)
    return candidate.with_defines(cand, {"WGMMA": 1} | (values or {}))


@pytest.fixture
def evaluator(bench_evaluator: GpuEvaluator) -> GpuEvaluator:
    """The session's evaluator of every task at the benchmark size (tests/gpu/conftest.py; the two
    attention tasks at 8 x 16 heads, 4096 tokens), no tuning, torch.compile off. Under a spread -n
    these tests run beside the other tests of their task on it (xdist_gpus.BY_TASK), which find
    the task prepared."""
    return bench_evaluator


def report(name: str, result) -> None:
    timing = result.timing
    library = f", cuDNN SDPA {result.library_us:.1f} us ({result.library_us / timing.median_us:.2f}x)" \
        if result.library_us else ""
    print(f"\n{name}: {timing.median_us:.1f} us, {timing.tflops:.0f} TFLOP/s{library}")


@pytest.mark.parametrize("task", [PLAIN, CAUSAL], ids=lambda t: t.name)
def test_the_wgmma_template_is_ok_at_every_test_size(evaluator, task):
    result = evaluator.evaluate(wgmma(task))
    assert result.verdict == Verdict.OK, result.message
    assert len(result.checks) == len(task.test_sizes) + 1 and all(c.passed for c in result.checks)
    assert result.timing is not None and result.timing.median_us > 0
    report(f"{task.name} WGMMA defaults", result)


@pytest.mark.parametrize("task,values", VARIANTS,
                         ids=[f"{t.name}-" + "-".join(f"{k}{x}" for k, x in v.items()) for t, v in VARIANTS])
def test_wgmma_switches_and_tunables_are_ok(evaluator, task, values):
    result = evaluator.evaluate(wgmma(task, values))
    assert result.verdict == Verdict.OK, result.message
    report(f"{task.name} WGMMA {values}", result)


@pytest.mark.parametrize("flaw", sorted(BROKEN))
def test_a_broken_wgmma_kernel_is_wrong(evaluator, flaw):
    right, wrong = BROKEN[flaw]
    assert PLAIN.template_source.count(right) == 1
    result = evaluator.evaluate(wgmma(PLAIN, source=PLAIN.template_source.replace(right, wrong)))
    assert result.verdict == Verdict.WRONG, result.message
    assert not all(c.passed for c in result.checks)


def test_the_causal_mask_dropped_is_wrong(evaluator):
    right = "if (edge && !(key < jb.seq && (!CAUSAL || key <= jb.r0 + 8 * h))) x = -INFINITY;"
    assert CAUSAL.template_source.count(right) == 1
    source = CAUSAL.template_source.replace(right, "if (edge && !(key < jb.seq)) x = -INFINITY;")
    result = evaluator.evaluate(wgmma(CAUSAL, {"WG_OVERLAP": 1}, source=source))
    assert result.verdict == Verdict.WRONG, result.message
