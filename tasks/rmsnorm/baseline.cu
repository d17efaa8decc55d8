/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "rmsnorm_baseline"
grid = ["cdiv(rows, BLOCK)"]
block = ["BLOCK"]
args = ["x", "weight", "y", "rows", "cols", "eps"]
*/
// The plain version: one thread per row, two passes over the row (sum of squares, output).
extern "C" __global__ void rmsnorm_baseline(const float* x, const float* weight, float* y, int rows, int cols,
                                            float eps) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;
    float sq = 0.0f;
    for (int c = 0; c < cols; ++c) sq += xr[c] * xr[c];
    const float rms = sqrtf(sq / cols + eps);
    for (int c = 0; c < cols; ++c) yr[c] = xr[c] / rms * weight[c];
}
