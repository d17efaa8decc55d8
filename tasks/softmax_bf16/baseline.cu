/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "softmax_bf16_baseline"
grid = ["cdiv(rows, BLOCK)"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
// The plain version: one thread per row, three passes over the row, float32 arithmetic on the
// bfloat16 elements, each output rounded to bfloat16 once.
#include <cuda_bf16.h>

extern "C" __global__ void softmax_bf16_baseline(const __nv_bfloat16* x, __nv_bfloat16* y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const __nv_bfloat16* xr = x + (size_t)r * cols;
    __nv_bfloat16* yr = y + (size_t)r * cols;
    float m = -INFINITY;
    for (int c = 0; c < cols; ++c) m = fmaxf(m, __bfloat162float(xr[c]));
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += expf(__bfloat162float(xr[c]) - m);
    for (int c = 0; c < cols; ++c) yr[c] = __float2bfloat16_rn(expf(__bfloat162float(xr[c]) - m) / s);
}
