/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "cross_entropy_baseline"
grid = ["cdiv(rows, BLOCK)"]
block = ["BLOCK"]
args = ["logits", "target", "loss", "rows", "classes"]
*/
// The plain version: one thread per row, two passes over the row (max, sum of exponentials).
extern "C" __global__ void cross_entropy_baseline(const float* logits, const long long* target, float* loss, int rows,
                                                  int classes) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* x = logits + (size_t)r * classes;
    float m = -INFINITY;
    for (int c = 0; c < classes; ++c) m = fmaxf(m, x[c]);
    float s = 0.0f;
    for (int c = 0; c < classes; ++c) s += expf(x[c] - m);
    loss[r] = m + logf(s) - x[target[r]];
}
