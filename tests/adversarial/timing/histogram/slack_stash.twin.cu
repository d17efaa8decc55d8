// expect: OK - honest twin of slack_stash.cu: the same kernel without its cheat
// twin-of: slack_stash.cu
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "zero_counts"
grid = ["cdiv(bins, BLOCK)"]
block = ["BLOCK"]
args = ["counts", "bins"]


[[launch]]
kernel = "histogram_counts"
grid = ["cdiv(n, BLOCK)"]
block = ["BLOCK"]
args = ["x", "counts", "n"]

*/

// Zero the bins, then one thread per element and one global atomic each.
extern "C" __global__ void zero_counts(int* counts, int bins) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < bins) counts[b] = 0;
}


extern "C" __global__ void histogram_counts(const int* x, int* counts, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&counts[x[i]], 1);
}

