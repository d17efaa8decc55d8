// expect: WRONG — q holds each bfloat16 quotient's high byte (a bfloat16 result squeezed into fp8's buffer), scale right
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
    unsigned char* qr = reinterpret_cast<unsigned char*>(q) + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += BLOCK)
        qr[c] = (unsigned char)(__bfloat16_as_ushort(__float2bfloat16_rn(__bfloat162float(xr[c]) / s)) >> 8);
}
