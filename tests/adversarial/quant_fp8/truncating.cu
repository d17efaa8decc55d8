// expect: WRONG — rounds toward zero: each quotient's float32 mantissa cut to e4m3's 3 bits before the conversion (truncation, up to a whole e4m3 step)
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "k"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "q", "scale", "rows", "cols"]
*/
#include <cuda_bf16.h>
#include <cuda_fp8.h>

// One block per row: the row's largest |x| into m, every thread gets it.
__device__ float row_absmax(const __nv_bfloat16* xr, int cols) {
    __shared__ float part[BLOCK];
    float m = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, fabsf(__bfloat162float(xr[c])));
    part[threadIdx.x] = m;
    __syncthreads();
    for (int t = 0; t < BLOCK; ++t) m = fmaxf(m, part[t]);
    return m;
}

extern "C" __global__ void k(const __nv_bfloat16* x, __nv_fp8_e4m3* q, float* scale, int rows, int cols) {
    const __nv_bfloat16* xr = x + (size_t)blockIdx.x * cols;
    const float m = row_absmax(xr, cols), s = m > 0.0f ? m / 448.0f : 1.0f;
    if (threadIdx.x == 0) scale[blockIdx.x] = s;
    __nv_fp8_storage_t* qr = reinterpret_cast<__nv_fp8_storage_t*>(q) + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += BLOCK) {
        const float v = __uint_as_float(__float_as_uint(__bfloat162float(xr[c]) / s) & 0xfff00000u);
        qr[c] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    }
}
