/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "zero_counts"
grid = ["cdiv(bins, BLOCK)"]
block = ["BLOCK"]
args = ["counts", "bins"]

[[launch]]
kernel = "histogram_baseline"
grid = ["cdiv(n, BLOCK)"]
block = ["BLOCK"]
args = ["x", "counts", "n"]
*/
// The plain version: zero the bins, then one thread per element and one global atomic each.
extern "C" __global__ void zero_counts(int* counts, int bins) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < bins) counts[b] = 0;
}

extern "C" __global__ void histogram_baseline(const int* x, int* counts, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&counts[x[i]], 1);
}
