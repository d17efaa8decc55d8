// expect: OK - honest twin of no_eps.cu: the same kernel without its cheat
// twin-of: no_eps.cu
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "rmsnorm_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "weight", "y", "rows", "cols", "eps"]
*/
__device__ float block_sum(float v, float* red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    float total = red[0];
    __syncthreads();
    return total;
}

extern "C" __global__ void rmsnorm_rows(const float* x, const float* weight, float* y, int rows, int cols,
                                        float eps) {
    __shared__ float red[BLOCK];
    const float* xr = x + (size_t)blockIdx.x * cols;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) sq += xr[c] * xr[c];
    const float ms = block_sum(sq, red) / cols;
    float kept = eps;
    const float inv = rsqrtf(ms + kept);
    for (int c = threadIdx.x; c < cols; c += BLOCK)
        y[(size_t)blockIdx.x * cols + c] = xr[c] * inv * weight[c];
}
