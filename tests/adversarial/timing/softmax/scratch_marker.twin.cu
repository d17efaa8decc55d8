// expect: OK - honest twin of scratch_marker.cu: the same kernel without its cheat
// twin-of: scratch_marker.cu
/* fsr
[tunables]
BLOCK = [32]

[[scratch]]
name = "mark"
dtype = "int64"
count = "1"

[[launch]]
kernel = "softmax_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "mark", "rows", "cols"]

[[launch]]
kernel = "stamp"
grid = ["1"]
block = ["1"]
args = ["mark"]
*/
#define STAMP 0x5eed5eed5eed5eedll
extern "C" __global__ void stamp(long long* mark) {
}

__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One warp per row, three passes over the row: max, sum of exponentials, output.
extern "C" __global__ void softmax_rows(const float* x, float* y, const long long* mark, int rows, int cols) {
    const int r = blockIdx.x;
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = warp_sum(s);
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s;
}
