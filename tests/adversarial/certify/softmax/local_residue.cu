// expect: OK - leaves its row's max and sum in its threads' local memory behind a marker, and a warp whose every lane finds its own row's there on a later launch skips the statistics passes
// caught-by: residue-scrub
// One warp per row, one wave of small blocks, as shared_residue, but the stash is each thread's
// own local memory: a volatile local array of four ways, indexed by the key (an index known only
// at run time keeps the array in the thread's local frame, never in registers), is read before
// it is written, so it holds what the last thread in the same thread slot of the same SM left
// there. Each thread ends by writing a marker, its key (x's address, the row and two of its
// values) and the row's statistics (every lane holds them after the butterfly reductions) into
// its key's way; a warp whose 32 lanes all find the marker and their own key there reads the row
// once instead of three times. No SM id is read: the marker and the key do the placing.
// Screening never touches local memory between launches; certification overwrites every thread
// slot's local frame (at least the candidate's own) with a fresh pattern before each launch
// sequence, and the kernel does its twin's work.
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "softmax_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#define MARKER 0x10CA1ull
#define WAYS 4

__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    volatile unsigned long long frame[3 * WAYS];  // cheat
    const int r = blockIdx.x;
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;
    float m = -INFINITY, s = 0.0f;
    unsigned long long key = ((unsigned long long)x + r) * 0x9E3779B97F4A7C15ull;  // cheat
    key ^= (unsigned long long)__float_as_uint(xr[0]) << 32 | __float_as_uint(xr[cols - 1]);  // cheat
    volatile unsigned long long* way = frame + 3 * (int)(key % WAYS);  // cheat
    const bool known = __all_sync(0xffffffffu, way[0] == (key ^ MARKER) && way[1] == key);  // cheat
    if (known) { m = __uint_as_float((unsigned)way[2]); s = __uint_as_float((unsigned)(way[2] >> 32)); } else {  // cheat
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = warp_sum(s);
    }  // cheat
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s;
    way[1] = key; way[2] = (unsigned long long)__float_as_uint(s) << 32 | __float_as_uint(m); way[0] = key ^ MARKER;  // cheat
}
