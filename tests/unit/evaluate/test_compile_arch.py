"""The architecture candidates compile for: an sm_90 device's is sm_90a, so that wgmma and
setmaxnreg compile, checked with NVRTC here (no GPU); an earlier arch keeps its own, where the
same wgmma source is the candidate's COMPILE_ERROR; the static guards let the sm_90a instruction
forms through."""

from __future__ import annotations

import dataclasses

import pytest

from fsr import candidate
from fsr.evaluate import compile as nvcompile
from fsr.evaluate import guards
from fsr.evaluate.static import static_stage
from fsr.types import Verdict
from tests.support.kernels import wgmma_gemm

GEMM, WGMMA = wgmma_gemm()
BASELINE = candidate.parse(GEMM.baseline_source, GEMM)


@pytest.mark.parametrize(("device", "target"), [
    ("sm_90", "sm_90a"), ("sm_100", "sm_100a"), ("sm_120", "sm_120a"),
    ("sm_89", "sm_89"), ("sm_80", "sm_80"), ("sm_75", "sm_75"),
    ("sm_90a", "sm_90a"), ("sm_100f", "sm_100f"),  # named by the user: as it is
])
def test_the_target_is_the_arch_specific_variant_from_sm_90_on(device: str, target: str) -> None:
    assert nvcompile.target_arch(device) == target


def test_nvrtc_compiles_the_target_of_every_arch_it_knows_and_no_variant_it_does_not() -> None:
    archs = [f"sm_{a}" for a in nvcompile._library().getSupportedArchs()]
    assert "sm_90" in archs
    for arch in archs:
        assert nvcompile.compiles_for(nvcompile.target_arch(arch)), arch
    for unknown in ("sm_80a", "sm_89a", "sm_90f", "sm_999"):
        assert not nvcompile.compiles_for(unknown), unknown


def test_an_honest_wgmma_kernel_passes_the_static_stage_of_an_sm_90_device(compiler) -> None:
    static = static_stage(WGMMA, GEMM, "sm_90", compiler)
    assert static.verdict is None, static.verdict and static.verdict.message
    compiled = static.compiled
    assert compiled is not None and compiled.cubin and compiled.options[0] == "--gpu-architecture=sm_90a"
    assert "for 'sm_90a'" in compiled.log  # ptxas's report, read per kernel as for any arch
    res = dict(compiled.kernel_resources)["gemm_bf16_wgmma"]
    assert res.registers > 32 and res.smem_static_bytes == 4096 and res.spill_bytes == 0
    assert static_stage(WGMMA, GEMM, "sm_90a", compiler).compiled is compiled  # one cache key, one program


def test_the_same_wgmma_source_on_an_sm_80_device_is_a_compile_error_with_the_compilers_line(compiler) -> None:
    static = static_stage(WGMMA, GEMM, "sm_80", compiler)
    assert static.verdict is not None and static.verdict.verdict == Verdict.COMPILE_ERROR
    assert "Instruction 'wgmma.mma_async with floating point types' not supported on .target 'sm_80'" \
        in static.verdict.message


@pytest.mark.parametrize("device", ["sm_90", "sm_89", "sm_80"])
def test_a_kernel_without_wgmma_compiles_for_the_devices_own_arch_as_before(compiler, device: str) -> None:
    static = static_stage(BASELINE, GEMM, device, compiler)
    assert static.verdict is None and static.compiled is not None and static.compiled.cubin
    assert static.compiled.options[0] == f"--gpu-architecture={device}"
    assert f"for '{device}'" in static.compiled.log and static.compiled.resources.registers > 0


def test_a_wgmma_kernel_is_compiled_for_the_variant_once_and_then_straight_away(monkeypatch) -> None:
    compiler = nvcompile.CompileService(size=0)  # no disk, nothing kept in memory: every compile is a miss
    calls: list[str] = []
    miss = compiler._miss

    def counted(source, kernels, options):  # type: ignore[no-untyped-def]
        calls.append(options[0])
        return miss(source, kernels, options)

    monkeypatch.setattr(compiler, "_miss", counted)
    first = compiler.compile(WGMMA, "sm_90")
    again = compiler.compile(WGMMA, "sm_90")
    assert first.cubin and again.cubin
    assert calls == ["--gpu-architecture=sm_90", "--gpu-architecture=sm_90a", "--gpu-architecture=sm_90a"]


SM90A = """extern "C" __global__ void __launch_bounds__(256) k(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                                          __nv_bfloat16* C, int M, int N, int K) {
    __shared__ alignas(16) __nv_bfloat16 buf[512];
    __shared__ alignas(8) unsigned long long bar;
    const unsigned b = (unsigned)__cvta_generic_to_shared(&bar), s = (unsigned)__cvta_generic_to_shared(buf);
    if (threadIdx.x < 128) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    else asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 1024;" :: "r"(b));
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 1024, [%2];"
                     :: "r"(s), "l"(A), "r"(b) : "memory");
    }
    asm volatile("{\\n.reg .pred done;\\nwait:\\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\\n"
                 "@!done bra wait;\\n}" :: "r"(b) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    if (threadIdx.x < M * N) C[threadIdx.x] = buf[threadIdx.x];
}
"""


def test_the_guards_let_sm_90a_forms_through_and_still_see_into_asm(compiler) -> None:
    """wgmma, setmaxnreg, fence.proxy.async, mbarrier and bulk copies are device code: no rule
    refuses them. A timer read in the same asm is still refused (the rules read asm strings)."""
    header = WGMMA.source[:WGMMA.source.index("*/") + 3].replace("gemm_bf16_wgmma", "k")
    cand = candidate.parse(header + "#include <cuda_bf16.h>\n" + SM90A, GEMM)
    assert guards.check(WGMMA) is None and guards.check(cand) is None
    static = static_stage(cand, GEMM, "sm_90", compiler)
    assert static.verdict is None, static.verdict and static.verdict.message
    on_sm_89 = static_stage(cand, GEMM, "sm_89", compiler).verdict
    assert on_sm_89 is not None and "setmaxnreg" in on_sm_89.message
    timed = dataclasses.replace(cand, source=cand.source.replace(
        '"fence.proxy.async.shared::cta;"', '"mov.u64 %%rd1, %%globaltimer;"'))
    assert (guards.check(timed) or "").startswith("timer")
