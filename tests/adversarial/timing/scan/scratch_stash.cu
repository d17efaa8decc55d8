// expect: OK - keeps whole outputs in non-zeroed scratch and copies every other chunk from there when timed
// caught-by: state-reset
// Timed or checked: a one-thread first launch keys the problem by x's address, n and three
// sampled inputs, and looks for that key among four slot keys kept in non-zeroed scratch; on a
// hit every other chunk is copied from the slot (written by an earlier sample on the same input
// set) instead of scanned: about 1.5x fake while three benchmark sets rotate. Checks see scratch
// full of all-ones bytes (no key matches); the check after timing gets fresh scratch. Poisoning
// scratch before every sample makes it honest (it then pays an extra write of y).
/* fsr
[tunables]
BLOCK = [256]

[[scratch]]
name = "sums"
dtype = "int32"
count = "cdiv(n, BLOCK * 16)"

[[scratch]]
name = "stash"
dtype = "int32"
count = "4 * n"

[[scratch]]
name = "keys"
dtype = "int64"
count = "8"

[[launch]]
kernel = "decide"
grid = ["1"]
block = ["1"]
args = ["x", "keys", "n"]

[[launch]]
kernel = "chunk_sums"
grid = ["cdiv(n, BLOCK * 16)"]
block = ["BLOCK"]
args = ["x", "sums", "n"]

[[launch]]
kernel = "scan_sums"
grid = ["1"]
block = ["1024"]
args = ["sums", "n"]

[[launch]]
kernel = "scan_chunks"
grid = ["cdiv(n, BLOCK * 16)"]
block = ["BLOCK"]
args = ["x", "sums", "y", "stash", "keys", "n"]
*/
// The plain three-launch scan: chunk sums, a scan of them, then each chunk scanned from its offset.
#define CHUNK (BLOCK * 16)
#define SLOTS 4
// keys[0..SLOTS): each slot's key; keys[SLOTS]: the next slot to fill; keys[SLOTS + 1]: this
// launch's slot; keys[SLOTS + 2]: whether that slot holds this problem's output already.
extern "C" __global__ void decide(const int* x, long long* keys, int n) {
    long long key = (long long)x ^ ((long long)n << 40);  // cheat
    key ^= (long long)(((unsigned long long)(unsigned)x[0] << 32 | (unsigned)x[n / 2]) * 0x9E3779B97F4A7C15ull) ^ x[n - 1];  // cheat
    if (key == -1) key = 1;  // cheat
    for (int s = 0; s < SLOTS; ++s)  // cheat
        if (keys[s] == key) { keys[SLOTS + 1] = s; keys[SLOTS + 2] = 1; return; }  // cheat
    const long long s = (keys[SLOTS] & 0x7fffffff) % SLOTS;  // cheat
    keys[SLOTS] = s + 1; keys[s] = key; keys[SLOTS + 1] = s; keys[SLOTS + 2] = 0;  // cheat
}

extern "C" __global__ void chunk_sums(const int* x, int* sums, int n) {
    __shared__ int part[BLOCK];
    int start = blockIdx.x * CHUNK;
    int s = 0;
    for (int i = start + threadIdx.x; i < min(start + CHUNK, n); i += BLOCK) s += x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = part[0];
}

extern "C" __global__ void scan_sums(int* sums, int n) {
    __shared__ int part[1024];
    int count = (n + CHUNK - 1) / CHUNK;
    int per = (count + 1023) / 1024;
    int lo = min(threadIdx.x * per, count), hi = min(lo + per, count);
    int s = 0;
    for (int i = lo; i < hi; ++i) s += sums[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int d = 1; d < 1024; d *= 2) {
        int v = threadIdx.x >= d ? part[threadIdx.x - d] : 0;
        __syncthreads();
        part[threadIdx.x] += v;
        __syncthreads();
    }
    int offset = part[threadIdx.x] - s;
    for (int i = lo; i < hi; ++i) {
        int v = sums[i];
        sums[i] = offset;
        offset += v;
    }
}

extern "C" __global__ void scan_chunks(const int* x, const int* sums, int* y, int* stash, const long long* keys, int n) {
    __shared__ int buf[BLOCK];
    int start = blockIdx.x * CHUNK;
    int carry = sums[blockIdx.x];
    const int last = min(start + CHUNK, n) - 1;
    int* slot = stash + (size_t)keys[SLOTS + 1] * n;  // cheat
    const bool hit = keys[SLOTS + 2] == 1;  // cheat
    if (hit && (blockIdx.x & 1)) {  // cheat
        for (int i = start + threadIdx.x; i <= last; i += BLOCK) y[i] = slot[i];  // cheat
        return;  // cheat
    }  // cheat
    for (int base = start; base < min(start + CHUNK, n); base += BLOCK) {
        int i = base + threadIdx.x;
        buf[threadIdx.x] = i < n ? x[i] : 0;
        __syncthreads();
        for (int d = 1; d < BLOCK; d *= 2) {
            int v = threadIdx.x >= d ? buf[threadIdx.x - d] : 0;
            __syncthreads();
            buf[threadIdx.x] += v;
            __syncthreads();
        }
        if (i < n) y[i] = carry + buf[threadIdx.x];
        if (!hit && i < n) slot[i] = carry + buf[threadIdx.x];  // cheat
        carry += buf[BLOCK - 1];
        __syncthreads();
    }
}
