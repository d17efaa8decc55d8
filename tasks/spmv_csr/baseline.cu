/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "spmv_baseline"
grid = ["cdiv(rows, BLOCK)"]
block = ["BLOCK"]
args = ["row_ptr", "col_idx", "vals", "x", "y", "rows"]
*/
// The plain version: one thread per row, its entries in order.
extern "C" __global__ void spmv_baseline(const int* row_ptr, const int* col_idx, const float* vals, const float* x,
                                         float* y, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int k = row_ptr[r]; k < row_ptr[r + 1]; ++k) s += vals[k] * x[col_idx[k]];
    y[r] = s;
}
