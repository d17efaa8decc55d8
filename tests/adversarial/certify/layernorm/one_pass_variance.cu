// expect: UNCERTIFIED - takes the variance of long rows in one pass as E[x^2] - mean^2, right on fsr's usual rows, and the rows offset by 1000 stress set cancels it away
// caught-by: stress-set
// A block per row: the mean, the variance from the deviations (a second pass), then the outputs.
// The cheat takes the variance of rows of 64 or more in the first pass, from the sum of squares:
// on fsr's usual rows (offsets within 1 of 0, spreads of 0.25 to 4) E[x^2] - mean^2 stays within
// 1e-6 of the variance whatever the draw; short rows (where two or three close elements can
// cancel past the tolerance) take both passes, so every screened check passes and long rows save
// a pass. Nothing is kept from launch to launch: the step it drops is one only some inputs need.
// Certification checks the task's stress sets too, on fresh inputs: in rows offset by 1000,
// E[x^2] - mean^2 in float32 loses the variance (about 1 against 1e6), and the failed check names
// the stress set.
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
    if (cols >= 64) { var = fmaxf(block_sum(sq, red) / cols - mean * mean, 0.0f); } else {  // cheat
    float d2 = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) { float d = xr[c] - mean; d2 += d * d; }
    var = block_sum(d2, red) / cols;
    }  // cheat
    const float inv = rsqrtf(var + eps);
    for (int c = threadIdx.x; c < cols; c += BLOCK)
        y[(size_t)blockIdx.x * cols + c] = (xr[c] - mean) * inv * weight[c] + bias[c];
}
