// expect: WRONG - writes zeros when the inputs are small: the old absolute tolerance let zeros pass
// Right at the usual magnitudes. When x is small (a stress check scales the inputs by 1e-3),
// every output is below the task's atol and the kernel writes zeros without reading A: that
// passed an absolute tolerance. The tolerance's absolute part is now capped at a fraction of
// the reference's RMS (and scaled with the outputs), so zeros are wrong.
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "gemv_small"
grid = ["cdiv(M, BLOCK)"]
block = ["BLOCK"]
args = ["A", "x", "y", "M", "N"]
*/
extern "C" __global__ void gemv_small(const float* A, const float* x, float* y, int M, int N) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    if (fabsf(x[0]) < 0.01f && fabsf(x[N - 1]) < 0.01f) {  // inputs of 1e-3 scale: outputs below atol
        y[r] = 0.0f;
        return;
    }
    const float* a = A + (size_t)r * N;
    float acc = 0.0f;
    for (int c = 0; c < N; ++c) acc += a[c] * x[c];
    y[r] = acc;
}
