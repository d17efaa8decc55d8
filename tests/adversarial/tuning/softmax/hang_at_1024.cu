// expect: OK - deadlocks at BLOCK 1024 only; right and timed at 512 and 256
// fails-at: BLOCK=1024 TIMEOUT
// One block per row, three passes. Before the output pass the threads meet at a spin barrier
// (a shared arrival counter) whose target is miscounted at 1024 threads, so that
// configuration never leaves it. A bad tunable value must cost its trial (recorded as TIMEOUT,
// the child replaced, tuning going on), not the candidate, and well within the candidate's
// timeout (a trial's deadline is a small multiple of the best trial so far).
/* fsr
[tunables]
BLOCK = [512, 256, 1024]

[[launch]]
kernel = "softmax_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#define ARRIVALS (BLOCK < 1024 ? BLOCK : BLOCK + 1)  // the miscount: 1025 arrivals awaited of 1024 threads

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
    __shared__ int arrived;
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    if (threadIdx.x == 0) arrived = 0;
    __syncthreads();
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = block_reduce(m, true, red);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = block_reduce(s, false, red);
    atomicAdd(&arrived, 1);
    while (*(volatile int*)&arrived < ARRIVALS) { }
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s;
}
