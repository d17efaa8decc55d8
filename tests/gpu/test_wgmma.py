"""Hopper's path of the bf16 GEMM templates on a real GPU (sm_90): with WGMMA on, tiles arrive by
TMA into 128-byte-swizzled stages and wgmma multiplies them from shared memory. The template is
judged OK at every test size of gemm_bf16 (its mma.sync launch where K or N is not a multiple of
8) at its default tunables and at the others' corners, and so is the fused GELU variant (whose
epilogue goes through shared memory); the same code with a wrong copy coordinate, a wrong B
descriptor or an unswizzled descriptor is judged WRONG at a size the wgmma launch runs. The
TFLOP/s at the bench size is printed (`pytest -s`)."""

from __future__ import annotations

import pytest

from fsr import candidate, tasks
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Verdict

pytestmark = pytest.mark.gpu
GEMM = tasks.load("gemm_bf16")
GELU = tasks.load("gemm_bf16_gelu")

RIGHT_B = "tma_load(b + j * 64 * 128, b_tiles, n0 + 64 * j, 64 * kt, full);  // (n, k)"
BROKEN = {
    "coordinates": (RIGHT_B, "tma_load(b + j * 64 * 128, b_tiles, 64 * kt, n0 + 64 * j, full);"),  # (k, n)
    "descriptor": ("#define WG_B_LBO (64 * 128)\n#define WG_B_SBO 1024",
                   "#define WG_B_LBO 1024\n#define WG_B_SBO (64 * 128)"),  # B's two strides swapped
    "swizzle": ("(unsigned long long)(sbo >> 4) << 32 | 1ull << 62;",
                "(unsigned long long)(sbo >> 4) << 32;"),  # the stages are swizzled, the descriptors say not
}
VARIANTS = [(GEMM, {"WG_BN": 128, "WG_MT": 2}), (GEMM, {"WG_BN": 128}), (GEMM, {"WG_CONSUMERS": 1}),
            (GEMM, {"WG_STAGES": 6, "WG_GROUP": 16}), (GEMM, {"WG_STAGES": 3, "WG_CONSUMERS": 1, "WG_BN": 128, "WG_MT": 2}),
            (GELU, {"WG_BN": 128, "WG_MT": 2, "WG_STAGES": 3}), (GELU, {"WG_CONSUMERS": 1, "FAST_MATH": 1, "VEC4": 1})]


def aligned(size) -> bool:
    sizes = dict(size)
    return sizes["K"] % 8 == 0 and sizes["N"] % 8 == 0


def wgmma(task, values=None, source=None) -> candidate.Candidate:
    cand = candidate.parse(source or task.template_source, task)
    return candidate.with_defines(cand, {"WGMMA": 1} | (values or {}))


@pytest.fixture
def evaluator(bench_evaluator: GpuEvaluator) -> GpuEvaluator:
    """The session's evaluator of every task at the benchmark size (tests/gpu/conftest.py; the GEMMs
    at 8192^3), no tuning, torch.compile off: none of these kernels crashes or hangs (a wrong one
    is only wrong), so its child and contents stay. Under a spread -n these tests run beside the
    other tests of their task on it (xdist_gpus.BY_TASK), which find the task prepared."""
    return bench_evaluator


def report(name: str, result) -> None:
    timing = result.timing
    library = f", cuBLAS {result.library_us:.1f} us" if result.library_us else ""
    print(f"\n{name}: {timing.median_us:.1f} us, {timing.tflops:.0f} TFLOP/s{library}")


@pytest.mark.parametrize("task", [GEMM, GELU], ids=lambda t: t.name)
def test_the_wgmma_template_is_ok_at_every_test_size(evaluator, task):
    result = evaluator.evaluate(wgmma(task))
    assert result.verdict == Verdict.OK, result.message
    assert len(result.checks) == len(task.test_sizes) + 1 and all(c.passed for c in result.checks)
    assert any(aligned(c.size) for c in result.checks) and not all(aligned(c.size) for c in result.checks)
    assert result.timing is not None and result.timing.median_us > 0
    report(f"{task.name} WGMMA defaults", result)


@pytest.mark.parametrize("task,values", VARIANTS,
                         ids=[f"{t.name}-" + "-".join(f"{k}{x}" for k, x in v.items()) for t, v in VARIANTS])
def test_wgmma_tunables_are_ok(evaluator, task, values):
    result = evaluator.evaluate(wgmma(task, values))
    assert result.verdict == Verdict.OK, result.message
    report(f"{task.name} WGMMA {values}", result)


@pytest.mark.parametrize("flaw", sorted(BROKEN))
def test_a_broken_wgmma_kernel_is_wrong_where_it_runs(evaluator, flaw):
    right, wrong = BROKEN[flaw]
    assert GEMM.template_source.count(right) == 1
    result = evaluator.evaluate(wgmma(GEMM, source=GEMM.template_source.replace(right, wrong)))
    assert result.verdict == Verdict.WRONG, result.message
    failed = result.checks[-1]
    assert not failed.passed and aligned(failed.size), failed  # the mma.sync launch's sizes still pass
    assert all(c.passed for c in result.checks[:-1])
