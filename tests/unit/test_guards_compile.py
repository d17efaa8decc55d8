"""Static guards and NVRTC compilation (no GPU needed)."""

import dataclasses

import pytest

from fsr import candidate, tasks
from fsr.evaluate import compile as nvcompile
from fsr.evaluate import guards

SOFTMAX = tasks.load("softmax")
BASE = candidate.parse(SOFTMAX.baseline_source, SOFTMAX)


def with_body(extra: str):
    return dataclasses.replace(BASE, source=BASE.source + "\n" + extra)


@pytest.mark.parametrize("extra,rule", [
    ("__device__ void f() { printf(\"x\"); }", "printf"),
    ("__device__ long f() { return clock64(); }", "timer"),
    ("__device__ unsigned long long t() { unsigned long long v; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(v)); return v; }", "timer"),
    ("void h() { cudaMalloc(0, 4); }", "host-api"),
    ("int main() { return 0; }", "host-main"),
    ("__global__ void g(float* y) { k<<<1, 1>>>(y); }", "kernel-launch"),
    ("__device__ float* f() { return (float*)malloc(4); }", "device-heap"),
    ("__host__ int f() { return 1; }", "host-function"),
    ("#include <stdio.h>", "not allowed"),
    ("#include <cute/tensor.hpp>", "not allowed"),  # NVRTC does not compile CuTe with fsr's options (docs/candidates.md)
])
def test_guard_refuses_with_reason(extra, rule):
    reason = guards.check(with_body(extra))
    assert reason is not None and rule in reason


@pytest.mark.parametrize("extra", [
    "__host__ __device__ inline float sq(float v) { return v * v; }",
    "#include <cuda_fp16.h>",
    "// printf(\"in a comment is fine\")",
    "__device__ float fast(float v) { return __expf(v); }",
])
def test_guard_allows_device_code(extra):
    assert guards.check(with_body(extra)) is None


def test_compile_reports_resources_and_caches(compiler):
    first = compiler.compile(BASE, "sm_90")
    assert first.cubin and first.resources.registers > 0 and first.resources.spill_bytes == 0
    assert dict(first.lowered)["softmax_baseline"] == "softmax_baseline"
    assert compiler.compile(BASE, "sm_90") is first


def test_compile_error_carries_the_log_with_file_line_numbers(compiler):
    bad = dataclasses.replace(BASE, source=BASE.source.replace("fmaxf(m, xr[c])", "fmaxf(m, xr[c]"))
    with pytest.raises(nvcompile.CompileFailed) as info:
        compiler.compile(bad, "sm_90")
    line = next(i for i, t in enumerate(BASE.source.splitlines(), 1) if "fmaxf" in t)
    assert f"candidate.cu({line})" in info.value.log


def test_c_plus_plus_kernel_names_are_lowered(compiler):
    src = BASE.source.replace('extern "C" ', "")
    compiled = compiler.compile(dataclasses.replace(BASE, source=src), "sm_90")
    assert dict(compiled.lowered)["softmax_baseline"].startswith("_Z")


def test_disallowed_compile_option_is_refused(compiler):
    with pytest.raises(nvcompile.CompileFailed, match="not allowed"):
        compiler.compile(dataclasses.replace(BASE, compile_options=("-I/etc",)), "sm_90")


def test_parse_resources_from_ptxas_log():
    log = """ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem"""
    r = nvcompile.parse_resources(log)["k"]
    assert (r.registers, r.spill_bytes, r.smem_static_bytes, r.stack_bytes) == (40, 12, 2048, 16)


def test_compare_counts_nan_and_out_of_tolerance_elements():
    import numpy as np

    from fsr.dtypes import Tolerance
    from fsr.evaluate.gpu.verify import compare, expect

    ref = np.linspace(-1.0, 1.0, 100).reshape(10, 10)
    exp = expect(ref, "float32", Tolerance(1e-6, 1e-4))
    assert compare("y", ref.astype(np.float32), exp)[0]
    bad = ref.astype(np.float32)
    bad[3, 4] = np.nan
    bad[5, 5] *= 1.01
    ok, _, detail = compare("y", bad, exp)
    assert not ok and "2 of 100 elements wrong" in detail and "1 never written" in detail and "y[3, 4]" in detail


def test_compare_on_threads_finds_one_bad_element_among_millions():
    import numpy as np

    from fsr.dtypes import Tolerance
    from fsr.evaluate.gpu.verify import PARALLEL_ELEMENTS, compare, expect

    ref = np.random.default_rng(0).standard_normal(PARALLEL_ELEMENTS + 12345)
    exp = expect(ref, "float32", Tolerance(1e-6, 1e-4))
    got = ref.astype(np.float32)
    assert compare("y", got, exp)[0]
    got[-7] += 1.0
    ok, _, detail = compare("y", got, exp)
    assert not ok and detail.startswith("1 of")
