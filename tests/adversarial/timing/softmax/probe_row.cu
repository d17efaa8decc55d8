// expect: WRONG - checks two outputs of every fourth row against the inputs and keeps the row if they agree
// caught-by: output-decoy | state-reset
// Timed or checked: softmax has no cheap single-element probe (any y needs the whole row's
// max and sum), but a ratio needs none: y[r, 0] / y[r, n-1] = exp(x[r, 0] - x[r, n-1]). A row
// whose two outputs are numbers in that ratio was computed from these inputs before, so every
// fourth such row is kept: about 1.3x fake when timed, never in a check (NaN outputs). Only a
// decoy that is right at the probed elements and wrong elsewhere exposes it.
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "softmax_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One warp per row, three passes over the row: max, sum of exponentials, output.
extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    const int r = blockIdx.x;
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;
    const float ya = yr[0], yb = yr[cols - 1];  // cheat
    if ((r & 3) == 0 && ya == ya && yb == yb && fabsf(ya - yb * expf(xr[0] - xr[cols - 1])) <= 1e-5f * ya) return;  // cheat
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = warp_sum(s);
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s;
}
