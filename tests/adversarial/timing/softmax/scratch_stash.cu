// expect: OK - keeps each row's max and sum in non-zeroed scratch and skips the statistics pass when they are there
// caught-by: state-reset
// Timed or checked: a two-pass softmax (statistics, then output) whose statistics live in
// non-zeroed scratch with room for four input sets. A one-thread first launch keys the problem
// by x's address and two sampled inputs; if a slot holds that key the statistics launch does
// nothing and the output pass reuses what an earlier sample left: about 1.5-2x fake while three
// benchmark sets rotate. Checks see scratch full of NaN bytes (no key matches), the check after
// timing gets fresh scratch. Poisoning scratch before every sample makes it honest.
/* fsr
[tunables]
BLOCK = [32]

[[scratch]]
name = "stats"
dtype = "float32"
count = "8 * rows"

[[scratch]]
name = "keys"
dtype = "int64"
count = "8"

[[launch]]
kernel = "decide"
grid = ["1"]
block = ["1"]
args = ["x", "keys", "rows", "cols"]

[[launch]]
kernel = "row_stats"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "stats", "keys", "rows", "cols"]

[[launch]]
kernel = "apply"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "stats", "keys", "rows", "cols"]
*/
#define SLOTS 4
// keys[0..SLOTS): each slot's key; keys[SLOTS]: the next slot to fill; keys[SLOTS + 1]: this
// launch's slot; keys[SLOTS + 2]: whether that slot holds this problem's statistics already.
extern "C" __global__ void decide(const float* x, long long* keys, int rows, int cols) {
    long long key = (long long)x ^ ((long long)rows << 40) ^ (long long)cols;  // cheat
    key ^= (long long)(((unsigned long long)__float_as_uint(x[0]) << 32 | __float_as_uint(x[(size_t)rows * cols - 1])) * 0x9E3779B97F4A7C15ull);  // cheat
    if (key == -1) key = 1;  // cheat
    for (int s = 0; s < SLOTS; ++s)  // cheat
        if (keys[s] == key) { keys[SLOTS + 1] = s; keys[SLOTS + 2] = 1; return; }  // cheat
    const long long s = (keys[SLOTS] & 0x7fffffff) % SLOTS;  // cheat
    keys[SLOTS] = s + 1; keys[s] = key; keys[SLOTS + 1] = s; keys[SLOTS + 2] = 0;  // cheat
}

__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One warp per row: the row's max and sum of exponentials.
extern "C" __global__ void row_stats(const float* x, float* stats, const long long* keys, int rows, int cols) {
    const int r = blockIdx.x;
    const float* xr = x + (size_t)r * cols;
    float2* st = reinterpret_cast<float2*>(stats);
    st += (size_t)keys[SLOTS + 1] * rows;  // cheat
    if (keys[SLOTS + 2] == 1) return;  // cheat
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = warp_sum(s);
    if (threadIdx.x == 0) st[r] = make_float2(m, s);
}

extern "C" __global__ void apply(const float* x, float* y, const float* stats, const long long* keys, int rows, int cols) {
    const int r = blockIdx.x;
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;
    const float2* st = reinterpret_cast<const float2*>(stats);
    st += (size_t)keys[SLOTS + 1] * rows;  // cheat
    const float2 ms = st[r];
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - ms.x) / ms.y;
}
