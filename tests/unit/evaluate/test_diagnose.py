"""Diagnostics from the machine code of kernels whose instruction mix is known, compiled here by
NVRTC (no GPU): a float4 copy, a scalar copy, an mma.sync kernel, one that spills; occupancy and
roofline by hand; "diagnostics unavailable" without the disassembler."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fsr.candidate import parse
from fsr.evaluate import diagnose
from fsr.evaluate.compile import CompilerUnavailable, CompileService
from fsr.testing.fakes import softmax_task
from fsr.types import DeviceInfo, Timing

TASK = softmax_task(None)  # x, y: float32[rows, cols]; timed at 8192 x 8192
COMPILER = CompileService()  # the test kernels are fsr's own: compiled in this process
H100 = DeviceInfo("H100", "sm_90", 132, 49152, 232448, 233472, 50 * 2**20, 65536, 3000.0, 50.0, 300.0)


def header(kernel: str, block: str = "256", grid: str = "cdiv(rows * cols, BLOCK)") -> str:
    return (f'/* fsr\n[tunables]\nBLOCK = [{block}]\n[[launch]]\nkernel = "{kernel}"\ngrid = ["{grid}"]\n'
            f'block = ["BLOCK"]\nargs = ["x", "y", "rows", "cols"]\n*/\n')


FLOAT4_COPY = header("copy4") + """extern "C" __global__ void copy4(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < rows * cols / 4) reinterpret_cast<float4*>(y)[i] = reinterpret_cast<const float4*>(x)[i];
}
"""
SCALAR_COPY = header("copy1") + """extern "C" __global__ void copy1(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < rows * cols) y[i] = x[i];
}
"""
MMA = header("mma", "32") + """extern "C" __global__ void mma(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    unsigned a0 = __float_as_uint(x[threadIdx.x]), a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3, b0 = a0 ^ 5, b1 = a0 ^ 9;
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    y[threadIdx.x] = d0 + d1 + d2 + d3;
}
"""
# 64 accumulators live across a loop, under a 32-register cap: ptxas must spill.
SPILL = header("spill", "128") + """extern "C" __global__ void spill(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    float acc[64];
    #pragma unroll
    for (int k = 0; k < 64; k++) acc[k] = x[k * 97 + threadIdx.x];
    for (int r = 0; r < rows; r++) {
        #pragma unroll
        for (int k = 0; k < 64; k++) acc[k] = acc[k] * x[r * cols + k] + acc[(k + 1) & 63];
    }
    float s = 0.f;
    #pragma unroll
    for (int k = 0; k < 64; k++) s += acc[k];
    y[blockIdx.x * BLOCK + threadIdx.x] = s;
}
"""


def compiled(source: str, options: tuple[str, ...] = ()):
    cand = replace(parse(source, TASK), compile_options=options)
    try:
        return cand, COMPILER.compile(cand, "sm_90")
    except CompilerUnavailable as e:
        pytest.skip(str(e))


def text(source: str, timing: Timing | None = None, options: tuple[str, ...] = ()) -> str:
    if diagnose.nvdisasm() is None:
        pytest.skip("nvdisasm is not installed (the nvidia-cuda-nvdisasm package)")
    cand, program = compiled(source, options)
    return diagnose.diagnose(program.cubin, program.lowered, program.kernel_resources, cand, TASK, H100, timing)


def timed(median_us: float) -> Timing:
    moved = 2 * 8192 * 8192 * 4
    return Timing(median_us, median_us, median_us, median_us, (median_us,), moved / median_us / 1e3,
                  5 * 8192 * 8192 / median_us / 1e6, 0.0)


def test_float4_copy_has_128_bit_accesses_only() -> None:
    out = text(FLOAT4_COPY, timed(200.0))
    assert "global loads 1 x 128-bit; stores 1 x 128-bit" in out
    assert "no tensor-core instructions" in out and "no local memory" in out and "no shared memory" in out
    assert "262144 blocks of 256 threads" in out and "theoretical occupancy 100% (64 of 64 warps an SM" in out
    assert "memory-bound" in out and "2684 GB/s, 89% of the measured copy bandwidth" in out
    assert "Most likely limit: memory bandwidth" in out


def test_scalar_copy_is_told_to_widen_its_accesses() -> None:
    out = text(SCALAR_COPY, timed(400.0))
    assert "global loads 1 x 32-bit; stores 1 x 32-bit" in out and "128-bit" not in out.split("Most")[0]
    assert "45% of the measured copy bandwidth" in out
    assert "Most likely limit: memory instructions: every global load and store is 32-bit" in out


def test_mma_kernel_shows_its_tensor_core_instructions() -> None:
    out = text(MMA)
    assert "tensor-core instructions" in out and "HMMA" in out
    assert "no tensor-core" not in out
    assert "median" not in out  # no timing: no fraction claimed


def test_a_wgmma_kernel_compiled_for_sm_90a_shows_its_hgmma_and_occupancy() -> None:
    """An sm_90 device's candidates compile for sm_90a: nvdisasm reads that cubin, and the
    occupancy table of sm_90 applies to it."""
    if diagnose.nvdisasm() is None:
        pytest.skip("nvdisasm is not installed (the nvidia-cuda-nvdisasm package)")
    from tests.support.kernels import wgmma_gemm

    GEMM, WGMMA = wgmma_gemm()

    program = COMPILER.compile(WGMMA, "sm_90")
    out = diagnose.diagnose(program.cubin, program.lowered, program.kernel_resources, WGMMA, GEMM, H100, None)
    assert "tensor-core instructions 1 HGMMA" in out
    assert "16384 blocks of 128 threads" in out and "theoretical occupancy" in out


def test_a_spilling_kernel_is_told_about_local_memory() -> None:
    out = text(SPILL, timed(1000.0), ("--maxrregcount=32",))
    assert "no local memory" not in out and "local memory" in out
    assert "Most likely limit: local memory" in out
    assert "32 registers a thread" in out


def test_without_the_disassembler_diagnostics_are_unavailable_never_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    cand, program = compiled(FLOAT4_COPY)
    monkeypatch.setattr(diagnose, "nvdisasm", lambda: None)
    out = diagnose.diagnose(program.cubin, program.lowered, program.kernel_resources, cand, TASK, H100, None)
    assert out.startswith(diagnose.UNAVAILABLE)
    monkeypatch.setattr(diagnose, "nvdisasm", lambda: "/bin/false")  # present but failing
    out = diagnose.diagnose(program.cubin, program.lowered, program.kernel_resources, cand, TASK, H100, None)
    assert out.startswith(diagnose.UNAVAILABLE)


@pytest.mark.parametrize(("arch", "threads", "registers", "smem", "warps", "limiter"), [
    ("sm_90", 256, 32, 0, 64, "threads"),
    ("sm_90", 256, 128, 0, 16, "registers"),  # 128 x 32 = 4096 registers a warp: 16 warps
    ("sm_90", 128, 32, 100 * 1024, 8, "shared memory"),  # (100 KiB + 1 KiB) fits twice in 228 KiB
    ("sm_86", 256, 32, 0, 48, "threads"),
    ("sm_90", 32, 16, 0, 32, "blocks"),  # 32 blocks of one warp
    ("sm_90a", 1024, 64, 0, 32, "registers"),
])
def test_occupancy_by_hand(arch: str, threads: int, registers: int, smem: int, warps: int, limiter: str) -> None:
    occ = diagnose.occupancy(arch, threads, registers, smem)
    assert occ is not None and (occ.warps, occ.limiter) == (warps, limiter)


def test_occupancy_of_an_architecture_not_tabulated_is_not_claimed() -> None:
    assert diagnose.occupancy("sm_75", 256, 32, 0) is None


def test_roofline_classes() -> None:
    memory = diagnose.roofline(TASK, H100, timed(200.0))
    assert memory is not None and memory.memory_bound and memory.fraction == pytest.approx(0.895, abs=0.001)
    sgemm = replace(TASK, flops_expr="2 * rows * cols * 1000")  # 250 flop/byte against 16.7
    compute = diagnose.roofline(sgemm, H100, None)
    assert compute is not None and not compute.memory_bound and compute.fraction is None
    assert diagnose.roofline(TASK, replace(H100, copy_gbps=0.0), None) is None


def test_sass_parsing_counts_widths_predicates_and_barriers() -> None:
    listing = """
        .section .text.k,"ax",@progbits
        /*0000*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;
        /*0010*/              @!P0 LDG.E.U16 R6, desc[UR4][R2.64] ;
        /*0020*/                   STG.E.64 desc[UR4][R8.64], R4 ;
        /*0030*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0040*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ ;
        /*0050*/                   STL [R1], R3 ;
        /*0060*/                   LDS R7, [R9] ;
        /*0070*/                   EXIT ;
        /*0080*/                   NOP;
    """
    m = diagnose.mix(diagnose.parse_sass(listing)["k"])
    assert m.loads == {128: 1, 16: 1} and m.stores == {64: 1}
    assert m.barriers == 1 and m.tensor == {"HGMMA": 1} and m.local_stores == 1 and m.shared == 1
    assert m.instructions == 8
