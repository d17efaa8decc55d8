/* fsr
[tunables]
BX = [32]
BY = [8]

[[launch]]
kernel = "transpose_baseline"
grid = ["cdiv(cols, BX)", "cdiv(rows, BY)"]
block = ["BX", "BY"]
args = ["x", "y", "rows", "cols"]
*/
// The plain version: one thread per element; reads along rows of x, writes down columns of y.
extern "C" __global__ void transpose_baseline(const float* x, float* y, int rows, int cols) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) y[(size_t)c * rows + r] = x[(size_t)r * cols + c];
}
