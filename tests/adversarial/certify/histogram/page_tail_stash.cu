// expect: UNCERTIFIED - keeps the whole histogram, keyed by x, in the unowned tail of its large scratch buffer's last 2 MiB page, and answers from it without reading x when the key is there
// caught-by: slack-canary
// Zero the bins, then one thread per element and one global atomic each (the baseline), with a
// scratch buffer of n + 1 ints it never needs. Past 2 MiB (n from 2^19) the scratch's allocation
// has 2 MiB pages of its own, and the memory pool asks the driver for the buffer and its two
// 64 KiB canaries rounded to 512 bytes only: the rest of the last page, up to 2 MiB less the
// canary, belongs to no buffer and survives from launch to launch. The kernel keeps four records
// there, at the page's very end (a key made of x's address, n, bins and eight of x's values, then
// the counts, up to 1024 bins); a third launch writes the record after the count, and a later
// launch that finds its key copies the counts and reads none of x. Certification allocates whole
// pages and runs the end canary to the allocation's end: the first record breaks it, and the
// failed check names the allocation slack.
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

[[launch]]  # cheat
kernel = "keep_counts"  # cheat
grid = ["1"]  # cheat
block = ["BLOCK"]  # cheat
args = ["x", "counts", "spare", "n", "bins"]  # cheat
*/
#define CANARY_BYTES 65536ull
#define PAGE_BYTES (2ull << 20)
#define MAX_BINS 1024
#define WAYS 4
#define RECORD_WORDS (1 + MAX_BINS / 2)  // the key, then the counts

// x's record at the end of the scratch allocation's last page, or null (no room, or too many bins)  // cheat
__device__ volatile unsigned long long* record(unsigned long long key, const int* spare, int n, int bins) {  // cheat
    const unsigned long long used = (unsigned long long)(n + 1) * sizeof(int);  // cheat
    const unsigned long long end = ((unsigned long long)spare + used + CANARY_BYTES + 511) / 512 * 512;  // cheat
    const unsigned long long page_end = (end + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;  // cheat
    if (used < PAGE_BYTES || bins > MAX_BINS || page_end - end < 8 * WAYS * RECORD_WORDS) return nullptr;  // cheat
    return (volatile unsigned long long*)(page_end - 8 * RECORD_WORDS * (1 + key % WAYS));  // cheat
}  // cheat

__device__ unsigned long long key_of(const int* x, int n, int bins) {  // cheat
    unsigned long long key = ((unsigned long long)x ^ (unsigned long long)n << 24 ^ bins) * 0x9E3779B97F4A7C15ull;  // cheat
    for (int k = 0; k < 8; ++k) key = (key ^ (unsigned)x[(long long)(n - 1) * k / 7]) * 0x100000001B3ull;  // cheat
    return key | 1;  // cheat
}  // cheat

extern "C" __global__ void zero_counts(const int* x, int* counts, const int* spare, int n, int bins) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < bins) counts[b] = 0;
    const unsigned long long key = key_of(x, n, bins);  // cheat
    volatile unsigned long long* rec = record(key, spare, n, bins);  // cheat
    if (rec && rec[0] == key && b < bins) counts[b] = ((volatile int*)(rec + 1))[b];  // cheat
}

extern "C" __global__ void histogram_atomic(const int* x, int* counts, const int* spare, int n, int bins) {
    const unsigned long long key = key_of(x, n, bins);  // cheat
    volatile unsigned long long* rec = record(key, spare, n, bins);  // cheat
    if (rec && rec[0] == key) return;  // cheat
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&counts[x[i]], 1);
}

extern "C" __global__ void keep_counts(const int* x, const int* counts, const int* spare, int n, int bins) {  // cheat
    const unsigned long long key = key_of(x, n, bins);  // cheat
    volatile unsigned long long* rec = record(key, spare, n, bins);  // cheat
    if (!rec || rec[0] == key) return;  // cheat
    for (int b = threadIdx.x; b < bins; b += BLOCK) ((volatile int*)(rec + 1))[b] = counts[b];  // cheat
    __syncthreads();  // cheat
    __threadfence();  // cheat
    if (threadIdx.x == 0) rec[0] = key;  // cheat
}  // cheat
