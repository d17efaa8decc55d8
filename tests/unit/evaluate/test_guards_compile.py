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


# -- guards on what runs: the PTX ------------------------------------------------------------------

CLOCK_CHEATS = {
    "chrono": "#include <cuda/std/chrono>\nextern \"C\" __global__ void z(long long* y) "
              "{ y[0] = cuda::std::chrono::system_clock::now().time_since_epoch().count(); }",
    "ptx-sreg": "#include <cuda/ptx>\nextern \"C\" __global__ void z(unsigned long long* y) { y[0] = cuda::ptx::get_sreg_clock64(); }",
    "split-asm": "extern \"C\" __global__ void z(unsigned long long* y) "
                 "{ unsigned long long v; asm volatile(\"mov.u64 %0, %%glob\" \"altimer;\" : \"=l\"(v)); y[0] = v; }",
    "string-hides-line": "extern \"C\" __global__ void z(long long* y) { const char* s = \"//\"; y[0] = clock64() + s[0]; }",
}


@pytest.mark.parametrize("name", sorted(CLOCK_CHEATS))
def test_clock_reads_the_old_rules_missed_are_rejected_at_the_static_stage(name, compiler):
    from fsr.evaluate.static import static_stage

    result = static_stage(with_body(CLOCK_CHEATS[name]), SOFTMAX, "sm_90", compiler)
    assert result.verdict is not None and result.verdict.verdict == "REJECTED" and "timer" in result.verdict.message
    compiled = compiler.compile(with_body(CLOCK_CHEATS[name]), "sm_90")
    reason = guards.check_ptx(compiled.ptx)  # the compiled program is refused on its own
    assert reason is not None and reason.startswith("timer") and "PTX" in reason


def test_a_string_holding_a_comment_marker_hides_nothing_from_the_source_rules():
    for extra, rule in [("__device__ void f() { const char* s = \"//\"; printf(\"x\"); }", "printf"),
                        ("__device__ float* f() { const char* s = \"a//b\"; return (float*)malloc(4); }", "device-heap"),
                        ("__device__ long f() { char c = '\"'; const char* s = \"//\"; return clock64(); }", "timer")]:
        reason = guards.check(with_body(extra))
        assert reason is not None and reason.startswith(rule), (extra, reason)


def test_adjacent_string_literals_are_joined_as_the_compiler_joins_them():
    assert guards.join_strings('asm("mov %%glob" "altimer;")') == 'asm("mov %%globaltimer;")'
    assert guards.join_strings('f("a", "b")') == 'f("a", "b")'  # a comma between: two strings
    assert guards.join_strings("x = '\"'; y = \"a\";") == "x = '\"'; y = \"a\";"


def test_what_the_preprocessor_builds_is_caught_in_the_ptx(compiler):
    """A register name made by stringising a macro argument is in no source line; the PTX has it."""
    from fsr.evaluate.static import static_stage

    extra = ("#define REG(x) \"mov.u64 %0, %%glob\" #x \";\"\nextern \"C\" __global__ void z(unsigned long long* y) "
             "{ unsigned long long v; asm volatile(REG(altimer) : \"=l\"(v)); y[0] = v; }")
    assert guards.check(with_body(extra)) is None  # the source rules see no timer
    result = static_stage(with_body(extra), SOFTMAX, "sm_90", compiler)
    assert result.verdict is not None and result.verdict.verdict == "REJECTED", result.verdict
    assert "'%globaltimer'" in result.verdict.message and "PTX" in result.verdict.message


@pytest.mark.parametrize("extra,rule", [
    ("extern \"C\" __global__ void z(float* y) { float* p = new float[4]; p[0] = 1; y[0] = p[0]; delete[] p; }", "device-heap"),
    ("#define P(f) f\nextern \"C\" __global__ void z(float* y) { P(printf)(\"%f\", y[0]); }", "printf"),
    ("#define S \"%%sm\" \"id\"\nextern \"C\" __global__ void z(unsigned* y) { unsigned v; asm(\"mov.u32 %0, \" S \";\" : \"=r\"(v)); y[0] = v; }", "sm-id"),
    ("#define G \"%%grid\" \"id\"\nextern \"C\" __global__ void z(unsigned long long* y) { unsigned long long v; asm(\"mov.u64 %0, \" G \";\" : \"=l\"(v)); y[0] = v; }", "launch-id"),
])
def test_calls_and_registers_are_refused_in_the_ptx(extra, rule, compiler):
    compiled = compiler.compile(with_body(extra), "sm_90")
    reason = guards.check_ptx(compiled.ptx)
    assert reason is not None and reason.startswith(rule), reason


def test_ptx_comments_do_not_run_and_assert_is_allowed():
    ptx = (".extern .func __assertfail\n(\n.param .b64 p0\n)\n;\n// mov.u64 %rd1, %globaltimer;\n"
           "/* call vprintf */\n.visible .entry k() { ret; }\n")
    assert guards.check_ptx(ptx) is None
    assert guards.check_ptx(ptx + ".extern .func (.param .b32 r) cudaLaunchDeviceV2\n(\n.param .b64 a\n)\n;\n").startswith("host-api")
    assert guards.check_ptx(ptx + "mov.u32 %r1, %clock;\n").startswith("timer")
    assert guards.check_ptx(ptx + "mov.u32 %r1, %warpid;\n").startswith("sm-id")
    assert guards.check_ptx(ptx + "mov.u64 %rd1, %gridid;\n").startswith("launch-id")
    assert guards.check_ptx(ptx + "// mov.u64 %rd1, %gridid;\n") is None  # a comment does not run


def test_honest_code_with_literals_passes_every_guard(compiler):
    extra = ("__device__ int sep() { return 1'000'000; }  // a digit separator is not a character literal\n"
             "__device__ char q() { return '\\''; }\n"
             "__device__ unsigned lane() { unsigned v; asm(\"mov.u32 %0, %%laneid;\" : \"=r\"(v)); return v; }")
    cand = with_body(extra)
    assert guards.check(cand) is None
    compiled = compiler.compile(cand, "sm_90")
    assert guards.check_compiled(compiled.ptx, compiled.cubin) is None


def test_a_16_mib_device_array_is_rejected_before_any_gpu_time(compiler):
    from fsr.evaluate.static import static_stage

    extra = "__device__ float stash[4 << 20];\nextern \"C\" __global__ void z(float* y) { stash[threadIdx.x] = y[0]; }"
    result = static_stage(with_body(extra), SOFTMAX, "sm_90", compiler)
    assert result.verdict is not None and result.verdict.verdict == "REJECTED"
    assert "16777216 bytes" in result.verdict.message and "__device__" in result.verdict.message
    assert static_stage(BASE, SOFTMAX, "sm_90", compiler).verdict is None


def test_a_tuning_trial_whose_program_reads_a_timer_is_refused_and_not_shipped(compiler):
    """Trials skip the source rules (the source is the candidate's): what each one compiled to is
    checked, and a refused one is left out of the programs sent to the GPU child."""
    from concurrent.futures import ThreadPoolExecutor

    from fsr.evaluate import trial_plan

    cheat = with_body(CLOCK_CHEATS["split-asm"])
    with pytest.raises(trial_plan.Refused, match="^timer"):
        trial_plan.compile_trial(cheat, SOFTMAX, "sm_90", compiler)
    assert trial_plan.compile_trial(BASE, SOFTMAX, "sm_90", compiler).cubin
    with ThreadPoolExecutor(1) as pool:
        ahead = {(("BLOCK", 64),): (pool.submit(trial_plan.compile_trial, cheat, SOFTMAX, "sm_90", compiler), True),
                 (("BLOCK", 128),): (pool.submit(trial_plan.compile_trial, BASE, SOFTMAX, "sm_90", compiler), True)}
        assert [key for key, *_ in trial_plan.compiled_trials(ahead)] == [(("BLOCK", 128),)]
