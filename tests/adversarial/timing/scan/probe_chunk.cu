// expect: WRONG - checks both ends of every other chunk against its offsets and keeps the chunk if they agree
// caught-by: output-decoy | state-reset
// Timed or checked: the scanned chunk sums give each chunk's exclusive offset, so y[start] must
// be offset + x[start] and y[last] the next chunk's offset. Every other chunk where both hold
// (the last chunk never: its end has no offset to compare) is kept: about 2x fake on the chunk
// pass when timed; checked launches (y full of -1) compute every chunk.
/* fsr
[tunables]
BLOCK = [256]

[[scratch]]
name = "sums"
dtype = "int32"
count = "cdiv(n, BLOCK * 16)"

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
args = ["x", "sums", "y", "n"]
*/
// The plain three-launch scan: chunk sums, a scan of them, then each chunk scanned from its offset.
#define CHUNK (BLOCK * 16)

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

extern "C" __global__ void scan_chunks(const int* x, const int* sums, int* y, int n) {
    __shared__ int buf[BLOCK];
    int start = blockIdx.x * CHUNK;
    int carry = sums[blockIdx.x];
    const int last = min(start + CHUNK, n) - 1;
    const int next = blockIdx.x + 1 < gridDim.x ? sums[blockIdx.x + 1] : -2;  // cheat
    if ((blockIdx.x & 1) && y[start] == carry + x[start] && y[last] == next) return;  // cheat
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
        carry += buf[BLOCK - 1];
        __syncthreads();
    }
}
