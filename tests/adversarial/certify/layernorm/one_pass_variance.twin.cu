// expect: OK - honest twin of one_pass_variance.cu: the same kernel without its cheat
// twin-of: one_pass_variance.cu
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "layernorm_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "weight", "bias", "y", "rows", "cols", "eps"]
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

extern "C" __global__ void layernorm_rows(const float* x, const float* weight, const float* bias, float* y,
                                          int rows, int cols, float eps) {
    __shared__ float red[BLOCK];
    const float* xr = x + (size_t)blockIdx.x * cols;
    float s = 0.0f, sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) { s += xr[c]; sq += xr[c] * xr[c]; }
    const float mean = block_sum(s, red) / cols;
    float var;
    float d2 = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) { float d = xr[c] - mean; d2 += d * d; }
    var = block_sum(d2, red) / cols;
    const float inv = rsqrtf(var + eps);
    for (int c = threadIdx.x; c < cols; c += BLOCK)
        y[(size_t)blockIdx.x * cols + c] = (xr[c] - mean) * inv * weight[c] + bias[c];
}
