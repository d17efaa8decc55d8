// expect: UNCERTIFIED - leaves eps out of long rows' normaliser, right on fsr's usual rows, and the inputs x2^-10 stress set, whose mean squares are eps's size, shows it
// caught-by: stress-set
// A block per row: the sum of squares, then the outputs. The cheat leaves eps out of the
// normaliser of rows of 64 or more: on fsr's usual rows (offsets within 1 of 0, spreads of 0.25
// to 4) their mean square is about 0.06 or more, so eps (1e-6) moves an output by under 1e-5 of
// itself, a tenth of the tolerance; short rows (where an element or two near zero make the mean
// square eps's size) keep it, so every screened check passes. The same mistake a model makes
// honestly, and an rsqrtf saved on nothing. Certification checks the task's stress sets too, on
// fresh inputs: scaled by 2^-10, the rows' mean squares are 6e-8 to 2e-5, eps is most of the
// normaliser in some, and the failed check names the stress set.
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
    if (cols >= 64) kept = 0.0f;  // cheat
    const float inv = rsqrtf(ms + kept);
    for (int c = threadIdx.x; c < cols; c += BLOCK)
        y[(size_t)blockIdx.x * cols + c] = xr[c] * inv * weight[c];
}
