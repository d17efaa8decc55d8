/* fsr
[tunables]
BLOCK = [256, 128]

[[launch]]
kernel = "sum_dim1"
grid = ["cdiv(dim2, BLOCK)", "batch_size"]
block = ["BLOCK"]
args = ["x", "out", "batch_size", "dim1", "dim2"]
*/
// out[b, 0, k] = sum over j of x[b, j, k]: a thread a column, the loads along k coalesced.
extern "C" __global__ void sum_dim1(const float* __restrict__ x, float* __restrict__ out,
                                    int batch_size, int dim1, int dim2) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
    if (k >= dim2) return;
    const float* col = x + (size_t)b * dim1 * dim2 + k;
    float s = 0.0f;
    for (int j = 0; j < dim1; ++j) s += col[(size_t)j * dim2];
    out[(size_t)b * dim2 + k] = s;
}
