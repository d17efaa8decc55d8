/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "rmsnorm_bf16_baseline"
grid = ["cdiv(rows, BLOCK)"]
block = ["BLOCK"]
args = ["x", "weight", "y", "rows", "cols", "eps"]
*/
// The plain version: one thread per row, two passes over the row (sum of squares, output), float32
// arithmetic on the bfloat16 elements, each output rounded to bfloat16 once.
#include <cuda_bf16.h>

extern "C" __global__ void rmsnorm_bf16_baseline(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                                 __nv_bfloat16* y, int rows, int cols, float eps) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const __nv_bfloat16* xr = x + (size_t)r * cols;
    __nv_bfloat16* yr = y + (size_t)r * cols;
    float sq = 0.0f;
    for (int c = 0; c < cols; ++c) {
        const float v = __bfloat162float(xr[c]);
        sq += v * v;
    }
    const float rms = sqrtf(sq / cols + eps);
    for (int c = 0; c < cols; ++c) yr[c] = __float2bfloat16_rn(__bfloat162float(xr[c]) / rms * __bfloat162float(weight[c]));
}
