// expect: WRONG — right answer, but overwrites its input with exp(x - max) on the way
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "k"
grid = ["cdiv(rows, BLOCK)"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
extern "C" __global__ void k(float* x, float* y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float* xr = x + (size_t)r * cols;
    float m = -INFINITY, s = 0.0f;
    for (int c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
    for (int c = 0; c < cols; ++c) { xr[c] = expf(xr[c] - m); s += xr[c]; }
    for (int c = 0; c < cols; ++c) y[(size_t)r * cols + c] = xr[c] / s;
}
