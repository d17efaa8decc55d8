/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "quant_fp8_baseline"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "q", "scale", "rows", "cols"]
*/
// The plain version: one block per row, two passes over the row: the largest |x| (each thread a
// strided share, then thread 0 over the threads' maxima), then each element divided by the
// row's scale and converted to e4m3, rounding to nearest even and saturating.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#define E4M3_MAX 448.0f

extern "C" __global__ void quant_fp8_baseline(const __nv_bfloat16* x, __nv_fp8_e4m3* q, float* scale, int rows, int cols) {
    __shared__ float part[BLOCK];
    __shared__ float row_scale;
    const int r = blockIdx.x;
    const __nv_bfloat16* xr = x + (size_t)r * cols;
    __nv_fp8_storage_t* qr = reinterpret_cast<__nv_fp8_storage_t*>(q) + (size_t)r * cols;
    float m = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, fabsf(__bfloat162float(xr[c])));
    part[threadIdx.x] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int t = 1; t < BLOCK; ++t) m = fmaxf(m, part[t]);
        row_scale = m > 0.0f ? m / E4M3_MAX : 1.0f;  // a row of zeros keeps scale 1 (and q 0)
        scale[r] = row_scale;
    }
    __syncthreads();
    const float s = row_scale;
    for (int c = threadIdx.x; c < cols; c += BLOCK)
        qr[c] = __nv_cvt_float_to_fp8(__bfloat162float(xr[c]) / s, __NV_SATFINITE, __NV_E4M3);
}
