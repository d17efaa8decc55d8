// expect: OK - leaves its row's max and sum in shared memory behind a marker, and a block that finds its own row's there on a later launch skips the statistics passes
// caught-by: residue-scrub
// One warp per row, one wave of small blocks: on an idle GPU a block lands where it landed on
// the last launch often enough, and shared memory keeps what the last block there wrote. Each
// block ends by writing a marker, its key (x's address, the row and two of its values) and the
// row's statistics into a static shared array; a block that starts and finds the marker and its
// own key reads the row once instead of three times. No SM id is read (the static rules refuse
// it): the marker and the key do the placing. Screening never touches shared memory between
// launches; certification scrubs every SM's shared memory before each launch sequence, and the
// kernel does its twin's work.
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "softmax_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#define MARKER 0x5E5D0E5ull

__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    __shared__ unsigned long long left[3];  // cheat
    volatile unsigned long long* stash = left;  // cheat
    const int r = blockIdx.x;
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;
    float m = -INFINITY, s = 0.0f;
    unsigned long long key = ((unsigned long long)x + r) * 0x9E3779B97F4A7C15ull;  // cheat
    key ^= (unsigned long long)__float_as_uint(xr[0]) << 32 | __float_as_uint(xr[cols - 1]);  // cheat
    const bool known = stash[0] == (key ^ MARKER) && stash[1] == key;  // cheat
    if (known) { m = __uint_as_float((unsigned)stash[2]); s = __uint_as_float((unsigned)(stash[2] >> 32)); } else {  // cheat
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = warp_sum(s);
    }  // cheat
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s;
    __syncwarp();  // cheat
    if (threadIdx.x == 0) { stash[1] = key; stash[2] = (unsigned long long)__float_as_uint(s) << 32 | __float_as_uint(m); stash[0] = key ^ MARKER; }  // cheat
}
