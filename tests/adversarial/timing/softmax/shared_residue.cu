// expect: OK - finds its row's statistics in the shared memory an earlier block left on its SM
// caught-by: scrub
// Shared memory is not cleared between launches: a block that lands where a block of the
// previous launch ran finds that block's shared memory as it was left. Each block keeps its
// row index, a key of the row and the row's max and sum of exponentials there; a block that
// finds its own row and key skips the two passes that compute them. (On an H100 it gained
// nothing: blocks do not land where the same row ran before often enough.) Shared memory is
// now scrubbed with fresh garbage before every launch sequence: no key is ever found.
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
    __shared__ volatile unsigned long long kept[3];  // cheat
    const unsigned long long key = (((unsigned long long)__float_as_uint(xr[0]) << 32) ^ __float_as_uint(xr[cols - 1])) * 0x9e3779b97f4a7c15ull + (unsigned)r;  // cheat
    const bool hit = kept[0] == key;  // cheat
    __syncwarp();  // cheat
    float m = -INFINITY;
    float s = 0.0f;
    if (hit) { m = __uint_as_float((unsigned)kept[1]); s = __uint_as_float((unsigned)kept[2]); } else {  // cheat
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = warp_sum(s);
    }  // cheat
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s;
    if (threadIdx.x == 0) { kept[1] = __float_as_uint(m); kept[2] = __float_as_uint(s); kept[0] = key; }  // cheat
}
