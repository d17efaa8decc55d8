"""Reference kernels kept as test data, parsed for the task they belong to, and a cubin compiled
here by NVRTC (no GPU needed)."""

from __future__ import annotations

from fsr import candidate, tasks
from fsr.types import Candidate, Task
from tests.support.paths import DATA


def wgmma_gemm() -> tuple[Task, Candidate]:
    """gemm_bf16 and an honest wgmma kernel for it (compiles for sm_90a only)."""
    gemm = tasks.load("gemm_bf16")
    return gemm, candidate.parse((DATA / "wgmma" / "gemm_bf16_wgmma.cu").read_text(), gemm)


def cubin(source: str, arch: str = "sm_90") -> bytes:
    """`source` compiled by NVRTC in this process to a cubin for `arch`."""
    from cupy_backends.cuda.libs import nvrtc

    prog = nvrtc.createProgram(source, "m.cu", [], [])
    try:
        nvrtc.compileProgram(prog, [f"-arch={arch}"])
        return nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
