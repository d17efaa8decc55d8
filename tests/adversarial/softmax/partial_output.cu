// expect: WRONG — computes only the first row
/* fsr
[tunables]
BLOCK = [1]

[[launch]]
kernel = "k"
grid = ["1"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {
    float m = -INFINITY, s = 0.0f;
    for (int c = 0; c < cols; ++c) m = fmaxf(m, x[c]);
    for (int c = 0; c < cols; ++c) s += expf(x[c] - m);
    for (int c = 0; c < cols; ++c) y[c] = expf(x[c] - m) / s;
}
