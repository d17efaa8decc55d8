// expect: OK - counts its launches in a __device__ counter and trusts y after the checks
// caught-by: state-reset | output-decoy
// Timed or checked: fsr checks every test size twice before it times (14 launches for softmax
// with tuning off); from the 15th launch on, every fourth row whose output already holds a
// number is skipped (the recheck's NaN outputs are still computed): about 1.3x fake. Resetting
// module globals before every launch sequence keeps the counter at zero: it is then honest.
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "softmax_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#define CHECKED_LAUNCHES 14
__device__ unsigned launches;  // cheat
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
    const unsigned seen = *(volatile unsigned*)&launches;  // cheat
    __syncwarp();  // cheat
    if (r == 0 && threadIdx.x == 0) atomicAdd(&launches, 1u);  // cheat
    if (seen >= CHECKED_LAUNCHES && (r & 3) == 0 && yr[0] == yr[0]) return;  // cheat
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = warp_sum(s);
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s;
}
