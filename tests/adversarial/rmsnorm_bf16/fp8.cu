// expect: WRONG — computes in fp8: the row and the output through e4m3, a lower precision than the bfloat16 task allows
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "k"
grid = ["cdiv(rows, BLOCK)"]
block = ["BLOCK"]
args = ["x", "weight", "y", "rows", "cols", "eps"]
*/
#include <cuda_bf16.h>
#include <cuda_fp8.h>

__device__ __forceinline__ float e4m3(float v) { return float(__nv_fp8_e4m3(v)); }

extern "C" __global__ void k(const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* y, int rows,
                             int cols, float eps) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const __nv_bfloat16* xr = x + (size_t)r * cols;
    float sq = 0.0f;
    for (int c = 0; c < cols; ++c) {
        const float v = e4m3(__bfloat162float(xr[c]));
        sq += v * v;
    }
    const float rstd = rsqrtf(sq / cols + eps);
    for (int c = 0; c < cols; ++c)
        y[(size_t)r * cols + c] = __float2bfloat16_rn(e4m3(e4m3(__bfloat162float(xr[c])) * rstd * __bfloat162float(weight[c])));
}
