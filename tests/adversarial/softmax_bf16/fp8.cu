// expect: WRONG — computes in fp8: inputs and outputs through e4m3, a lower precision than the bfloat16 task allows
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
#include <cuda_fp8.h>

__device__ __forceinline__ float e4m3(float v) { return float(__nv_fp8_e4m3(v)); }

extern "C" __global__ void k(const __nv_bfloat16* x, __nv_bfloat16* y, int rows, int cols) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const __nv_bfloat16* xr = x + (size_t)r * cols;
    float m = -INFINITY;
    for (int c = 0; c < cols; ++c) m = fmaxf(m, __bfloat162float(xr[c]));
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += expf(e4m3(__bfloat162float(xr[c]) - m));
    for (int c = 0; c < cols; ++c)
        y[(size_t)r * cols + c] = __float2bfloat16_rn(e4m3(expf(e4m3(__bfloat162float(xr[c]) - m)) / s));
}
