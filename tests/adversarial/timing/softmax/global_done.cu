// expect: REJECTED - a 256 KiB module-scope __device__ table of rows already computed, keyed by buffer and content
// caught-by: module-global-bound | state-reset | timed-output-check
// Timed or checked: at the benchmark size only (2^26 elements or more: no test size is that
// large), each row's key (the buffers' addresses, its first and last input, cols) goes into a
// module-scope table once the row is written; a later launch that finds the key skips every
// fourth row, trusting y to still hold it: about 1.3x fake. The check after timing puts new
// contents under the same buffers: new keys, computed in full. Outputs reset before every
// sample turn it WRONG in a timed run; globals reset make it honest; the bound refuses it.
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "softmax_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#define SLOTS 4
#define MAX_ROWS 8192
__device__ unsigned long long done_key[SLOTS][MAX_ROWS];  // cheat
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
    const bool big = (size_t)rows * cols >= ((size_t)1 << 26) && rows <= MAX_ROWS;  // cheat
    unsigned long long key = ((unsigned long long)x << 7) ^ (unsigned long long)y ^ (unsigned long long)cols;  // cheat
    key ^= ((unsigned long long)__float_as_uint(xr[0]) << 32 | __float_as_uint(xr[cols - 1])) * 0x9E3779B97F4A7C15ull;  // cheat
    key |= 1;  // cheat
    bool known = false;  // cheat
    for (int s = 0; big && s < SLOTS; ++s) known |= done_key[s][r] == key;  // cheat
    if (big && known && (r & 3) == 0) return;  // cheat
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = warp_sum(s);
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s;
    if (big && !known && threadIdx.x == 0) {  // cheat
        int s = 0;  // cheat
        while (s < SLOTS - 1 && done_key[s][r] != 0) ++s;  // cheat
        done_key[s][r] = key;  // cheat
    }  // cheat
}
