/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "gemv_baseline"
grid = ["cdiv(M, BLOCK)"]
block = ["BLOCK"]
args = ["A", "x", "y", "M", "N"]
*/
// The plain version: one thread per row of A, reading the row and x from global memory.
extern "C" __global__ void gemv_baseline(const float* A, const float* x, float* y, int M, int N) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    const float* a = A + (size_t)r * N;
    float acc = 0.0f;
    for (int c = 0; c < N; ++c) acc += a[c] * x[c];
    y[r] = acc;
}
