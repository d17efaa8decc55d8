"""Thread block clusters in the header or in `__cluster_dims__`: a grid that its cluster does not
divide at one of the task's sizes is a one-line header error on a machine without a GPU (the
driver would refuse the launch); a grid of whole clusters passes."""

from __future__ import annotations

import pytest

from fsr import candidate, tasks
from fsr.candidate import HeaderError
from fsr.evaluate.compile import CompileService
from fsr.evaluate.static import static_stage
from fsr.types import Verdict

GEMM = tasks.load("gemm_bf16")  # test sizes from N = 1 to 1024; M = 1 too

HEADER = """/* fsr
[tunables]
CL = [2, 1, 4]

[[launch]]
kernel = "gemm"
grid = [GRID, "cdiv(M, 16)"]
block = [16, 16]
args = ["A", "B", "C", "M", "N", "K"]
CLUSTER*/
#include <cuda_bf16.h>
extern "C" __global__ void QUALIFIER gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                                          int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc = fmaf(__bfloat162float(A[(size_t)row * K + k]), __bfloat162float(B[(size_t)k * N + col]), acc);
    C[(size_t)row * N + col] = __float2bfloat16_rn(acc);
}
"""


def source(grid: str, cluster: str = "", qualifier: str = "") -> str:
    return (HEADER.replace("GRID", grid).replace("CLUSTER", f"cluster = {cluster}\n" if cluster else "")
            .replace("QUALIFIER", qualifier))


@pytest.mark.parametrize(("grid", "cluster", "qualifier", "reason"), [
    ('"cdiv(N, 16)"', '["2"]', "", r"^gemm at M=1,N=1,K=1: grid \(1, 1, 1\) is not a whole number of \(2, 1, 1\) clusters"),
    ('"cdiv(N, 16)"', '["CL"]', "", r"grid \(1, 1, 1\) is not a whole number of \(2, 1, 1\)"),
    ('"cdiv(N, 16)"', '["1", "2"]', "", r"grid \(1, 1, 1\) is not a whole number of \(1, 2, 1\)"),
    ('"cdiv(N, 16)"', "", "__cluster_dims__(2, 1, 1)", r"grid \(1, 1, 1\) is not a whole number of \(2, 1, 1\)"),
    ('"cdiv(N, 16)"', "", "__launch_bounds__(256) __cluster_dims__(CL)", r"of \(2, 1, 1\) clusters"),
    ('"2 * cdiv(N, 32)"', '["2"]', "__cluster_dims__(2, 1, 1)", "declared twice"),
    ('"2 * cdiv(N, 32)"', '["0"]', "", r"cluster \[0\] needs 1 to 3 dimensions of at least 1"),
    ('"2 * cdiv(N, 32)"', '["CX"]', "", "gemm: cluster: unknown name 'CX'"),
])
def test_a_cluster_that_does_not_divide_the_grid_is_refused_in_one_line(grid, cluster, qualifier, reason):
    with pytest.raises(HeaderError, match=reason) as refused:
        candidate.parse(source(grid, cluster, qualifier), GEMM)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("grid", "cluster", "qualifier"), [
    ('"2 * cdiv(N, 32)"', '["2"]', ""),
    ('"CL * cdiv(N, 16 * CL)"', '["CL", "1", "1"]', ""),
    ('"2 * cdiv(N, 32)"', "", "__cluster_dims__(2, 1, 1)"),
    ('"cdiv(N, 16)"', '["1"]', ""),
    ('"cdiv(N, 16)"', "", ""),  # no cluster: nothing to divide
])
def test_a_grid_of_whole_clusters_passes(grid, cluster, qualifier):
    candidate.parse(source(grid, cluster, qualifier), GEMM)


def test_every_tunable_value_is_checked_where_it_is_chosen():
    cand = candidate.parse(source('"2 * cdiv(N, 32)"', '["CL"]'), GEMM)  # CL = 2 divides
    with pytest.raises(HeaderError, match=r"of \(4, 1, 1\) clusters"):
        candidate.check(candidate.with_defines(cand, {"CL": 4}), GEMM)


def test_cluster_dims_written_before_global_count_and_a_macro_fsr_cannot_read_is_left_to_the_device():
    before = source('"cdiv(N, 16)"').replace('extern "C" __global__', 'extern "C" __cluster_dims__(2, 1, 1) __global__')
    assert candidate.kernel_clusters(before) == {"gemm": ("2", "1", "1")}
    with pytest.raises(HeaderError, match=r"of \(2, 1, 1\) clusters"):
        candidate.parse(before, GEMM)
    # a macro of the file's own is not known here: the GPU child reads the kernel's compiled
    # cluster and refuses the launch in the same words before the driver sees it
    own = "#define PAIR 2\n" + source('"cdiv(N, 16)"', qualifier="__cluster_dims__(PAIR, 1, 1)")
    assert candidate.kernel_clusters(own) == {"gemm": ("PAIR", "1", "1")}
    candidate.parse(own, GEMM)


def test_the_static_stage_rejects_a_misfit_cluster_before_compiling():
    cand = candidate.parse(source('"2 * cdiv(N, 32)"', '["CL"]'), GEMM)
    static = static_stage(candidate.with_defines(cand, {"CL": 4}), GEMM, "sm_90", CompileService())
    assert static.verdict is not None and static.verdict.verdict == Verdict.REJECTED and static.compiled is None
    assert static.verdict.message.startswith("header: gemm at M=1,N=1,K=1: grid (2, 1, 1) is not a whole number")
