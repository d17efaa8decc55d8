// expect: WRONG — an output of zeros
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "k"
grid = ["cdiv(rows * cols, BLOCK)"]
block = ["BLOCK"]
args = ["x", "weight", "y", "rows", "cols", "eps"]
*/
#include <cuda_bf16.h>

extern "C" __global__ void k(const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* y, int rows,
                             int cols, float eps) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < (long long)rows * cols) y[i] = __float2bfloat16_rn(0.0f);
}
