// expect: OK - wrong only at BLOCK 1024 and more than 1024 rows (the benchmark size); right at 512 and 256
// fails-at: BLOCK=1024 WRONG
// One block per row. At 1024 threads a row of up to 8192 columns is held in registers (eight
// values a thread, one read of x instead of three), which makes that configuration the fastest
// in tuning, but that path keeps the row index in 10 bits, so past 1024 rows it computes row
// r mod 1024 into row r. Every test size has at most 1024 rows: the trial's check and the full
// check at the test sizes pass; only the benchmark size (8192 rows) is wrong. The winner failing
// its full check must cost that configuration (recorded as WRONG) and the next best be checked
// in its place, not sink the candidate as WRONG with a message about cached results.
/* fsr
[tunables]
BLOCK = [512, 256, 1024]

[[launch]]
kernel = "softmax_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#define HELD 8

__device__ float block_reduce(float v, bool is_max, float* red) {
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = red[0];
    for (int i = 1; i < BLOCK / 32; ++i) v = is_max ? fmaxf(v, red[i]) : v + red[i];
    __syncthreads();
    return v;
}

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    __shared__ float red[BLOCK / 32];
    if (BLOCK == 1024 && cols <= HELD * BLOCK) {  // the register path
        const int r = blockIdx.x & 1023;  // the bug: 10 bits of row index
        const float* xr = x + (size_t)r * cols;
        float* yr = y + (size_t)blockIdx.x * cols;
        float v[HELD];
        float m = -INFINITY;
#pragma unroll
        for (int k = 0; k < HELD; ++k) {
            const int c = threadIdx.x + k * BLOCK;
            v[k] = c < cols ? xr[c] : -INFINITY;
            m = fmaxf(m, v[k]);
        }
        m = block_reduce(m, true, red);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < HELD; ++k) {
            v[k] = expf(v[k] - m);
            s += v[k];
        }
        s = block_reduce(s, false, red);
#pragma unroll
        for (int k = 0; k < HELD; ++k) {
            const int c = threadIdx.x + k * BLOCK;
            if (c < cols) yr[c] = v[k] / s;
        }
        return;
    }
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = block_reduce(m, true, red);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = block_reduce(s, false, red);
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s;
}
