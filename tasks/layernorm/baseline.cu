/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "layernorm_baseline"
grid = ["cdiv(rows, BLOCK)"]
block = ["BLOCK"]
args = ["x", "weight", "bias", "y", "rows", "cols", "eps"]
*/
// The plain version: one thread per row, three passes over the row (mean, variance, output).
extern "C" __global__ void layernorm_baseline(const float* x, const float* weight, const float* bias, float* y,
                                              int rows, int cols, float eps) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) sum += xr[c];
    const float mean = sum / cols;
    float sq = 0.0f;
    for (int c = 0; c < cols; ++c) sq += (xr[c] - mean) * (xr[c] - mean);
    const float rstd = 1.0f / sqrtf(sq / cols + eps);
    for (int c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd * weight[c] + bias[c];
}
