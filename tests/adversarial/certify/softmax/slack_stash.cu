// expect: UNCERTIFIED - keeps rows' max and sum in the bytes past its scratch buffer's end canary, inside the allocation, and skips the statistics passes when they are there
// caught-by: slack-canary
// One warp per row, and a scratch buffer of an odd size (2 rows + 1 floats) it never needs: fsr
// puts 64 KiB of canary after it, and the memory pool rounds the allocation up to 512 bytes, so
// up to 508 bytes past the end canary belong to no buffer and survive from launch to launch (the
// same scratch serves every timed run). The kernel keeps there, for as many rows as fit, a key
// (x's address, the row and two of its values) and the row's statistics, and a block that finds
// its own key reads the row once instead of three times. Certification allocates whole pages
// and runs the end canary to the allocation's end: the first stash breaks it.
/* fsr
[tunables]
BLOCK = [32]

[[scratch]]
name = "spare"
dtype = "float32"
count = "2 * rows + 1"

[[launch]]
kernel = "softmax_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "spare", "rows", "cols"]
*/
#define CANARY_BYTES 65536

__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void softmax_rows(const float* x, float* y, float* spare, int rows, int cols) {
    const int r = blockIdx.x;
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;
    float m = -INFINITY, s = 0.0f;
    const size_t used = (size_t)(2 * rows + 1) * sizeof(float);  // cheat
    // 16-byte records past the end canary, one spare for the alignment  // cheat
    const int fit = (int)(((used + 511) / 512 * 512 - used) / 16);  // cheat
    volatile unsigned long long* slack = (volatile unsigned long long*)(((size_t)spare + used + CANARY_BYTES + 7) / 8 * 8);  // cheat
    const int fits = r < fit - 1;  // cheat
    unsigned long long key = ((unsigned long long)x + r) * 0x9E3779B97F4A7C15ull;  // cheat
    key ^= (unsigned long long)__float_as_uint(xr[0]) << 32 | __float_as_uint(xr[cols - 1]);  // cheat
    const bool known = fits && slack[2 * r] == key;  // cheat
    if (known) { m = __uint_as_float((unsigned)slack[2 * r + 1]); s = __uint_as_float((unsigned)(slack[2 * r + 1] >> 32)); } else {  // cheat
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = warp_sum(s);
    }  // cheat
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s;
    if (fits && !known && threadIdx.x == 0) { slack[2 * r + 1] = (unsigned long long)__float_as_uint(s) << 32 | __float_as_uint(m); __threadfence(); slack[2 * r] = key; }  // cheat
}
