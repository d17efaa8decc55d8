// expect: WRONG — right values, plus stray writes past the end of y (no bounds check on the tail)
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "k"
grid = ["cdiv(rows, BLOCK)"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) { y[(size_t)rows * cols + (r - rows)] = 0.0f; return; }  // out of bounds
    const float* xr = x + (size_t)r * cols;
    float m = -INFINITY, s = 0.0f;
    for (int c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
    for (int c = 0; c < cols; ++c) s += expf(xr[c] - m);
    for (int c = 0; c < cols; ++c) y[(size_t)r * cols + c] = expf(xr[c] - m) / s;
}
