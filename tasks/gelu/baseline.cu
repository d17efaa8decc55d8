/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "gelu_baseline"
grid = ["cdiv(n, BLOCK)"]
block = ["BLOCK"]
args = ["x", "y", "n"]
*/
// The plain version: one thread per element, the formula as written.
extern "C" __global__ void gelu_baseline(const float* x, float* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
}
