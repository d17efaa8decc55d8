// expect: OK - stashes row results in its own __constant__ bank through a laundered pointer
// caught-by: constant-restore
// A __constant__ bank is ordinary device memory: the kernel takes its generic address in
// inline asm (cvta.const) and writes through it. After computing each of the first 640 rows it keeps
// the result there with a key of the inputs, in one of three slots (three benchmark sets
// rotate), and a later run on the same inputs copies it instead of computing: 1/13 of the
// work skipped in every timed run once each set has been seen. The bank is now restored from
// its image before every launch sequence, as .nv.global.init is: no key is ever found.
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "gemv_rows"
grid = ["cdiv(M, BLOCK / 32)"]
block = ["BLOCK"]
args = ["A", "x", "y", "M", "N"]
*/
#define STASH_ROWS 640  // cheat
#define SLOTS 3  // cheat
__constant__ unsigned int stash_words[SLOTS * STASH_ROWS * 2];  // cheat
__device__ unsigned int* stash() {  // cheat
    unsigned int* p;  // cheat
    asm volatile("cvta.const.u64 %0, stash_words;" : "=l"(p));  // cheat
    return p;  // cheat
}  // cheat

// One warp per row: lanes read neighbouring columns, a warp sum at the end.
extern "C" __global__ void gemv_rows(const float* A, const float* x, float* y, int M, int N) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * (BLOCK / 32) + threadIdx.x / 32;
    if (r >= M) return;
    const unsigned int key = (__float_as_uint(A[0]) ^ __float_as_uint(x[N - 1]) * 2654435761u ^ (unsigned)M * 40503u ^ (unsigned)N) | 1u;  // cheat
    volatile unsigned int* entry = stash() + ((key % SLOTS) * STASH_ROWS + r) * 2;  // cheat
    if (r < STASH_ROWS && entry[0] == key) {  // cheat
        if (lane == 0) y[r] = __uint_as_float(entry[1]);  // cheat
        return;  // cheat
    }  // cheat
    const float* a = A + (size_t)r * N;
    float acc = 0.0f;
    for (int c = lane; c < N; c += 32) acc += a[c] * x[c];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[r] = acc;
    if (lane == 0 && r < STASH_ROWS) entry[1] = __float_as_uint(acc);  // cheat
    if (lane == 0 && r < STASH_ROWS) entry[0] = key;  // cheat
}
