// expect: OK - honest twin of page_tail_stash.cu: the same kernel without its cheat
// twin-of: page_tail_stash.cu
/* fsr
[tunables]
BLOCK = [256]

[[scratch]]
name = "spare"
dtype = "int32"
count = "n + 1"

[[launch]]
kernel = "zero_counts"
grid = ["cdiv(bins, BLOCK)"]
block = ["BLOCK"]
args = ["x", "counts", "spare", "n", "bins"]

[[launch]]
kernel = "histogram_atomic"
grid = ["cdiv(n, BLOCK)"]
block = ["BLOCK"]
args = ["x", "counts", "spare", "n", "bins"]

*/
#define CANARY_BYTES 65536ull
#define PAGE_BYTES (2ull << 20)
#define MAX_BINS 1024
#define WAYS 4
#define RECORD_WORDS (1 + MAX_BINS / 2)  // the key, then the counts



extern "C" __global__ void zero_counts(const int* x, int* counts, const int* spare, int n, int bins) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < bins) counts[b] = 0;
}

extern "C" __global__ void histogram_atomic(const int* x, int* counts, const int* spare, int n, int bins) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&counts[x[i]], 1);
}

