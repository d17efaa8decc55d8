// expect: OK - honest twin of constant_stash.cu: the same kernel without its cheat
// twin-of: constant_stash.cu
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "gemv_rows"
grid = ["cdiv(M, BLOCK / 32)"]
block = ["BLOCK"]
args = ["A", "x", "y", "M", "N"]
*/

// One warp per row: lanes read neighbouring columns, a warp sum at the end.
extern "C" __global__ void gemv_rows(const float* A, const float* x, float* y, int M, int N) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * (BLOCK / 32) + threadIdx.x / 32;
    if (r >= M) return;
    const float* a = A + (size_t)r * N;
    float acc = 0.0f;
    for (int c = lane; c < N; c += 32) acc += a[c] * x[c];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[r] = acc;
}
