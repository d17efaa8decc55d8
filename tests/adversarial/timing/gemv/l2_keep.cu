// expect: OK - keeps the first rows of A in the L2 across fsr's flush with evict_last loads
// caught-by: l2-flush
// Every run is right and does all of its work; the first 640 rows (40 MiB of A, most of an
// H100's L2) are read with a createpolicy evict_last hint, so a flush of normal-priority lines
// may evict everything else first and leave them in place for the next sample: part of A comes
// from the L2 in every timed run. The flush now reads its own buffer at the same high priority,
// then puts its lines back to normal: the kept rows are aged out, and the cheat is its twin.
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "gemv_rows"
grid = ["cdiv(M, BLOCK / 32)"]
block = ["BLOCK"]
args = ["A", "x", "y", "M", "N"]
*/
#define KEEP_ROWS 640  // cheat
__device__ __forceinline__ float load_last(const float* p, unsigned long long policy) {  // cheat
    float v;  // cheat
    asm volatile("ld.global.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(p), "l"(policy));  // cheat
    return v;  // cheat
}  // cheat

// One warp per row: lanes read neighbouring columns, a warp sum at the end.
extern "C" __global__ void gemv_rows(const float* A, const float* x, float* y, int M, int N) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * (BLOCK / 32) + threadIdx.x / 32;
    if (r >= M) return;
    unsigned long long policy;  // cheat
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));  // cheat
    const float* a = A + (size_t)r * N;
    float acc = 0.0f;
    for (int c = lane; c < N; c += 32) {
        const float v =
            r < KEEP_ROWS ? load_last(a + c, policy) :  // cheat
            a[c];
        acc += v * x[c];
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[r] = acc;
}
