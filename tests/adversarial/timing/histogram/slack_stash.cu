// expect: WRONG - keeps its counts past the end canary of its output, where nothing was checked
// caught-by: canary-block
// Right from a clean state. At the benchmark size only, after counting it copies the counts,
// keyed by three probe values of x, into one of three slots just past the output's end canary
// (bytes of the allocation that fsr neither poisoned nor checked: the pool rounds blocks up
// and maps whole pages), and a run that finds its key there copies the counts back and skips
// the counting: every timed run after the first of each set does almost nothing. Every
// buffer is now its own allocation of whole 2 MiB granules whose end canary runs to its end:
// the stash writes into the canary, which is checked after the timed runs.
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "zero_counts"
grid = ["cdiv(bins, BLOCK)"]
block = ["BLOCK"]
args = ["counts", "bins"]

[[launch]]  # cheat
kernel = "from_stash"  # cheat
grid = ["1"]  # cheat
block = ["BLOCK"]  # cheat
args = ["x", "counts", "bins", "n"]  # cheat

[[launch]]
kernel = "histogram_counts"
grid = ["cdiv(n, BLOCK)"]
block = ["BLOCK"]
args = ["x", "counts", "n"]

[[launch]]  # cheat
kernel = "to_stash"  # cheat
grid = ["1"]  # cheat
block = ["BLOCK"]  # cheat
args = ["x", "counts", "bins", "n"]  # cheat
*/
#define BENCH_N 134217728  // cheat
#define BENCH_BINS 256  // cheat
__device__ unsigned int* stash_of(int* counts) { return (unsigned int*)(counts + BENCH_BINS + 65536 / 4); }  // cheat
__device__ unsigned int key_of(const int* x, int n) {  // cheat
    return ((unsigned)x[0] * 2654435761u ^ (unsigned)x[n / 2] * 40503u ^ (unsigned)x[n - 1] * 97u) | 1u;  // cheat
}  // cheat

// Zero the bins, then one thread per element and one global atomic each.
extern "C" __global__ void zero_counts(int* counts, int bins) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < bins) counts[b] = 0;
}

extern "C" __global__ void from_stash(const int* x, int* counts, int bins, int n) {  // cheat
    if (n != BENCH_N || bins != BENCH_BINS) return;  // cheat
    unsigned int* stash = stash_of(counts);  // cheat
    const unsigned int key = key_of(x, n);  // cheat
    const unsigned int* slot = stash + 1 + (key % 3) * (BENCH_BINS + 1);  // cheat
    const bool hit = slot[0] == key;  // cheat
    for (int b = threadIdx.x; hit && b < bins; b += blockDim.x) counts[b] = (int)slot[1 + b];  // cheat
    __syncthreads();  // cheat
    if (threadIdx.x == 0) stash[0] = hit ? key : 0u;  // cheat
}  // cheat

extern "C" __global__ void histogram_counts(const int* x, int* counts, int n) {
    if (n == BENCH_N && *(volatile unsigned int*)stash_of(counts) == key_of(x, n)) return;  // cheat
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&counts[x[i]], 1);
}

extern "C" __global__ void to_stash(const int* x, int* counts, int bins, int n) {  // cheat
    if (n != BENCH_N || bins != BENCH_BINS) return;  // cheat
    const unsigned int key = key_of(x, n);  // cheat
    unsigned int* slot = stash_of(counts) + 1 + (key % 3) * (BENCH_BINS + 1);  // cheat
    for (int b = threadIdx.x; b < bins; b += blockDim.x) slot[1 + b] = (unsigned int)counts[b];  // cheat
    __syncthreads();  // cheat
    if (threadIdx.x == 0) slot[0] = key;  // cheat
}  // cheat
