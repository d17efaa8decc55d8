// expect: WRONG — an output of zeros: softmax's outputs are small (about 1 / cols), so an absolute 1e-2 would pass it; the relative check with a magnitude floor does not
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "k"
grid = ["cdiv(rows * cols, BLOCK)"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#include <cuda_bf16.h>

extern "C" __global__ void k(const __nv_bfloat16* x, __nv_bfloat16* y, int rows, int cols) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < (long long)rows * cols) y[i] = __float2bfloat16_rn(0.0f);
}
