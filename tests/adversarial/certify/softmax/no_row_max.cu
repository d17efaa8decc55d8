// expect: UNCERTIFIED - never takes the row maximum: exp(x) of fsr's usual inputs stays finite, so every screened check passes, and the logits x64 stress set overflows it
// caught-by: stress-set
// A block per row: the row's maximum (a block reduction in shared memory), its sum of
// exponentials, then the outputs. The cheat skips the first pass and takes 0 for the maximum: on
// fsr's usual inputs (|x| up to about 36) exp(x) and a row's sum stay finite and the outputs are
// right within tolerance, so screening judges it OK and faster by a pass. Nothing is kept from
// launch to launch: the step it drops is one only some inputs need, the mistake a model makes
// honestly. Certification checks the task's stress sets too, on fresh inputs: at logits x64
// exp(x) overflows to inf, the outputs are NaN, and the failed check names the stress set.
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "softmax_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    __shared__ float red[BLOCK];
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
#if 0  // cheat
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
#endif  // cheat
    m = 0.0f;  // cheat
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) sum += expf(xr[c] - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    sum = red[0];
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / sum;
}
