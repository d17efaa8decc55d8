// expect: WRONG — skips the normalisation: exp(x - max) without the division by the row's sum
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "k"
grid = ["cdiv(rows, BLOCK)"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#include <cuda_bf16.h>

extern "C" __global__ void k(const __nv_bfloat16* x, __nv_bfloat16* y, int rows, int cols) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const __nv_bfloat16* xr = x + (size_t)r * cols;
    float m = -INFINITY;
    for (int c = 0; c < cols; ++c) m = fmaxf(m, __bfloat162float(xr[c]));
    for (int c = 0; c < cols; ++c) y[(size_t)r * cols + c] = __float2bfloat16_rn(expf(__bfloat162float(xr[c]) - m));
}
