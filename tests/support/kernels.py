"""Reference kernels kept as test data, parsed for the task they belong to."""

from __future__ import annotations

from fsr import candidate, tasks
from fsr.types import Candidate, Task
from tests.support.paths import DATA


def wgmma_gemm() -> tuple[Task, Candidate]:
    """gemm_bf16 and an honest wgmma kernel for it (compiles for sm_90a only)."""
    gemm = tasks.load("gemm_bf16")
    return gemm, candidate.parse((DATA / "wgmma" / "gemm_bf16_wgmma.cu").read_text(), gemm)
