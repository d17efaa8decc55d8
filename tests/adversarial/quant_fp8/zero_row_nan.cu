// expect: WRONG — no case for a row of zeros: its scale is 0 and its q 0 / 0, NaN
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
    const float s = row_absmax(xr, cols) / 448.0f;
    if (threadIdx.x == 0) scale[blockIdx.x] = s;
    __nv_fp8_storage_t* qr = reinterpret_cast<__nv_fp8_storage_t*>(q) + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += BLOCK)
        qr[c] = __nv_cvt_float_to_fp8(__bfloat162float(xr[c]) / s, __NV_NOSAT, __NV_E4M3);
}
