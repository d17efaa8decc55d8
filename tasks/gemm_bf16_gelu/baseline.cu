/* fsr
[tunables]
BX = [16, 32, 8]   # threads per block along N
BY = [16, 8, 32]   # threads per block along M

[[launch]]
kernel = "gemm_bf16_gelu_baseline"
grid = ["cdiv(N, BX)", "cdiv(M, BY)"]
block = ["BX", "BY"]
args = ["A", "B", "bias", "C", "M", "N", "K"]
*/
// The plain version: one thread per element of C, reading its row of A and column of B from
// global memory, summing in float32 on the CUDA cores (no tensor cores), then the bias and GELU
// (tanh form) in float32, rounding once at the end.
#include <cuda_bf16.h>

extern "C" __global__ void gemm_bf16_gelu_baseline(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                                   const __nv_bfloat16* bias, __nv_bfloat16* C, int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc = fmaf(__bfloat162float(A[(size_t)row * K + k]), __bfloat162float(B[(size_t)k * N + col]), acc);
    const float x = acc + __bfloat162float(bias[col]);
    const float u = 0.7978845608f * (x + 0.044715f * x * x * x);  // sqrt(2 / pi) (x + 0.044715 x^3)
    C[(size_t)row * N + col] = __float2bfloat16_rn(0.5f * x * (1.0f + tanhf(u)));
}
