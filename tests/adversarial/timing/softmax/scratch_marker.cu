// expect: OK - a one-word marker in non-zeroed scratch says "this scratch was used before": timed
// caught-by: state-reset | timed-output-check
// Timed or checked: every checked launch sequence gets its non-zeroed scratch freshly filled
// with NaN bytes (all ones); timing allocates scratch once and never refills it, and the check
// after timing allocates a new one. A second launch stamps the scratch; the first, finding the
// stamp, knows it runs on used scratch (a timed sample, or even the first one: the memory pool
// hands back the last check's scratch, stamp and all) and skips every fourth row outright,
// never looking at y: about 1.3x fake, with those rows never written in timing. Nothing stateful
// is kept in module globals and no output is read. Checking timed outputs makes it WRONG;
// poisoning scratch before every sample makes it honest.
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
    *mark = STAMP;  // cheat
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
    if (*mark == STAMP && (r & 3) == 0) return;  // cheat
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = warp_sum(s);
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s;
}
