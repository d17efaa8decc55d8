"""Module-scope variables of several element types on a real GPU: restored before every launch
sequence, one variable at a time, so such a kernel is judged like any other (the restore over
the whole section once failed with cudaErrorInvalidValue, recorded as the kernel's CRASH), and
a value one launch sequence stashes in them is gone when the next one starts."""

from __future__ import annotations

import pytest

from fsr import candidate, tasks
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Verdict

pytestmark = pytest.mark.gpu

HEADER = """/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "k"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
{more}*/
__device__ unsigned long long seen[128];
__device__ float last[128];
__device__ float warp_max(float v) {{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}}
__device__ float warp_sum(float v) {{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}}
"""
SOFTMAX_ROW = """
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = warp_sum(s);
"""
# Both arrays written by the kernel, neither read back into its output: right at every size.
TWO_TYPES = HEADER.format(more="") + """
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {""" + SOFTMAX_ROW + """
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s;
    if (threadIdx.x == 0) { atomicAdd(&seen[blockIdx.x & 127], 1ull); last[blockIdx.x & 127] = m; }
}
"""
# A second launch stashes a value in each array (the first and the last element of the module's
# variables); the first launch writes it into its output if it finds it there: right only if
# nothing an earlier launch sequence (a check, a timed run) stashed is left when the next starts.
STASH = HEADER.format(more="""
[[launch]]
kernel = "stash"
grid = ["1"]
block = ["1"]
args = ["y"]
""") + """
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {""" + SOFTMAX_ROW + """
    const float found = (float)seen[0] + last[127];
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s + found;
}
extern "C" __global__ void stash(float* y) { seen[0] = 1ull; last[127] = 0.5f; }
"""
# String literals a `__device__` pointer array points to live in a writable section too
# (`.nv.global.init`, as `$str` variables): each is placed by its name, and the pointers, which
# the loader fills in (0 in the cubin), are restored to what it wrote, not to the cubin's zeros.
STRINGS = TWO_TYPES.replace("    if (threadIdx.x == 0) {", """    if (tags[blockIdx.x & 1][threadIdx.x & 3] == 'Z') yr[0] = 0.0f;
    if (threadIdx.x == 0) {""").replace("__device__ float last[128];", """__device__ float last[128];
__device__ const char* tags[2] = {"soft", "max"};""")


@pytest.fixture
def evaluator(bench_evaluator: GpuEvaluator) -> GpuEvaluator:
    """The session's evaluator of every task (softmax at its benchmark size), no tuning,
    torch.compile off; under a spread -n these tests run beside softmax's others on it
    (xdist_gpus.BY_TASK), which find the task prepared."""
    return bench_evaluator


def judge(evaluator: GpuEvaluator, source: str):
    return evaluator.evaluate(candidate.parse(source, tasks.load("softmax")), tune=False)


def test_a_kernel_writing_variables_of_two_element_types_is_judged_ok(evaluator):
    result = judge(evaluator, TWO_TYPES)
    assert result.verdict == Verdict.OK, f"{result.verdict}: {result.message[:400]}"
    assert result.timing is not None and len(result.checks) == len(tasks.load("softmax").test_sizes) + 1


def test_a_value_stashed_by_an_earlier_launch_sequence_is_not_found(evaluator):
    """Every check runs its size twice and every timed run is checked, each from restored
    variables: a stash that survived would be added to an output, and the verdict WRONG."""
    result = judge(evaluator, STASH)
    assert result.verdict == Verdict.OK, f"{result.verdict}: {result.message[:400]}"


def test_pointers_and_string_literals_in_a_writable_section_are_restored_as_loaded(evaluator):
    from fsr.evaluate import device_globals

    cand = candidate.parse(STRINGS, tasks.load("softmax"))
    compiled = evaluator.compiler.compile(cand, evaluator.device().arch)
    names = device_globals.read(compiled.cubin).names()
    assert any(n.startswith("$str") for n in names), names  # else this test shows nothing
    result = judge(evaluator, STRINGS)
    assert result.verdict == Verdict.OK, f"{result.verdict}: {result.message[:400]}"
