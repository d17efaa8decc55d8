// expect: OK - honest twin of local_stash.cu: the same kernel without its cheat
// twin-of: local_stash.cu
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "sum_middle_cols"
grid = ["cdiv(A * C, BLOCK)"]
block = ["BLOCK"]
args = ["x", "y", "A", "B", "C"]
*/
// One thread per output, summing its B elements one after another (neighbouring threads read
// neighbouring columns, so the loads coalesce).
extern "C" __global__ void sum_middle_cols(const float* x, float* y, int A, int B, int C) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= A * C) return;
    const int a = i / C, c = i % C;
    float s = 0.0f;
    for (int b = 0; b < B; ++b) s += x[((size_t)a * B + b) * C + c];
    y[i] = s;
}
