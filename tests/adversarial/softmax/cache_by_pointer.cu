// expect: OK — remembers the buffers it computed last, to skip the work when they repeat; fsr restores module
// variables before every launch sequence, so it never finds them repeated and always computes
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "k"
grid = ["cdiv(rows, BLOCK)"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
__device__ const float* last_x = nullptr;
__device__ float* last_y = nullptr;
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {
    if (last_x == x && last_y == y) return;  // "cached": same pointers, assume same answer
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        const float* xr = x + (size_t)r * cols;
        float m = -INFINITY, s = 0.0f;
        for (int c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        for (int c = 0; c < cols; ++c) s += expf(xr[c] - m);
        for (int c = 0; c < cols; ++c) y[(size_t)r * cols + c] = expf(xr[c] - m) / s;
    }
    // Races with other blocks still reading; a real cheat does the same.
    if (r == rows - 1) { last_x = x; last_y = y; }
}
