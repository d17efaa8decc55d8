"""A kernel that takes tensor maps compiles for an H100 or H200 with NVRTC here, with no GPU:
fsr gives the code the driver's `CUtensorMap` type (128 bytes, 64-byte aligned, as the driver's
header has it) where it names it, and the bulk tensor copy is plain sm_90 code."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fsr import candidate, tasks
from fsr.evaluate import compile as nvcompile
from fsr.evaluate.static import static_stage
from tests.support.paths import DATA

GEMM = tasks.load("gemm_bf16")
TMA = (DATA / "tma" / "gemm_bf16_tma.cu").read_text()


def test_the_tma_gemm_passes_the_static_stage_of_an_sm_90_device(compiler) -> None:
    static = static_stage(candidate.parse(TMA, GEMM), GEMM, "sm_90", compiler)
    assert static.verdict is None, static.verdict and static.verdict.message
    compiled = static.compiled
    assert compiled is not None and compiled.options[0] == "--gpu-architecture=sm_90"  # no sm_90a needed
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in compiled.ptx
    assert ".param .align 64 .b8 gemm_tma_param_0[128]" in compiled.ptx  # the map, passed by value
    assert dict(compiled.kernel_resources)["gemm_plain"].spill_bytes == 0


def test_the_map_type_is_given_only_to_code_that_names_it(compiler) -> None:
    plain = candidate.parse(GEMM.baseline_source, GEMM)
    assert "CUtensorMap" not in nvcompile.full_source(plain)  # every other candidate compiles as before
    assert nvcompile.TENSOR_MAP_PRELUDE in nvcompile.full_source(candidate.parse(TMA, GEMM))
    # cuda/barrier declares the type without defining it: the two agree
    with_barrier = replace(candidate.parse(TMA, GEMM), source=TMA.replace(
        "#include <cuda_bf16.h>", "#include <cuda_bf16.h>\n#include <cuda/barrier>"))
    assert static_stage(with_barrier, GEMM, "sm_90", compiler).verdict is None


def test_without_the_prelude_the_type_is_unknown_so_the_prelude_is_what_defines_it() -> None:
    kernel = 'extern "C" __global__ void k(const __grid_constant__ CUtensorMap m, int* y) { y[0] = 1; }'
    options = ("--gpu-architecture=sm_90", "--std=c++17")
    with pytest.raises(nvcompile.CompileFailed, match='identifier "CUtensorMap" is undefined'):
        nvcompile.nvrtc(kernel, ("k",), options)
    assert nvcompile.nvrtc(nvcompile.TENSOR_MAP_PRELUDE + kernel, ("k",), options).cubin
