/* fsr
[tunables]
BLOCK = [256, 128, 512]  # threads per block
TPR = [32, 8, 16, 4, 2]  # consecutive threads sharing a row (a power of two up to a warp)

[features]
WARP_SHUFFLE = [0, 1]   # a row's partial sums combined with __shfl_xor_sync (else through shared memory)
VEC4 = [0, 1]           # int4 and float4 loads of col_idx and vals over each row's 16-byte-aligned middle
READONLY = [0, 1]       # __restrict__ pointers and __ldg loads (x gathers through the read-only path)
STREAM = [0, 1]         # col_idx and vals loaded with __ldcs (evict first), so x stays in the caches
UNROLL = [0, 1]         # the row loops unrolled by 2: more loads in flight per thread
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__(BLOCK): registers bounded for the block size

[[launch]]
kernel = "spmv_template"
grid = ["cdiv(rows, BLOCK // TPR)"]
block = ["BLOCK"]
args = ["row_ptr", "col_idx", "vals", "x", "y", "rows"]
*/
// Feature template: CSR SpMV with TPR threads per row (vector CSR): lane l of a row's group
// sums entries l, l + TPR, ... (with VEC4, four consecutive entries at a time over the row's
// 16-byte-aligned middle); the group adds its partial sums. No thread returns early: groups
// past the last row run empty, so every lane reaches each shuffle and barrier.
#define RPB (BLOCK / TPR)  // rows per block
// Loops of a fixed trip count over register arrays: unrolled on request with UNROLL (the
// compiler unrolls such short loops of its own accord too).
#if UNROLL
#define FIXED_LOOP _Pragma("unroll")
#else
#define FIXED_LOOP
#endif

#if READONLY
#define RESTRICT __restrict__
#define LOAD(p) __ldg(p)
#else
#define RESTRICT
#define LOAD(p) (*(p))
#endif

#if STREAM
#define LOAD_STREAM(p) __ldcs(p)
#else
#define LOAD_STREAM(p) LOAD(p)
#endif

#if LAUNCH_BOUNDS
#define KERNEL_BOUNDS __launch_bounds__(BLOCK)
#else
#define KERNEL_BOUNDS
#endif

#if UNROLL
#define ROW_LOOP _Pragma("unroll 2")
#else
#define ROW_LOOP
#endif

#if WARP_SHUFFLE
__device__ __forceinline__ float group_sum(float v, float*) {
FIXED_LOOP
    for (int mask = TPR / 2; mask > 0; mask >>= 1) v += __shfl_xor_sync(0xffffffffu, v, mask);
    return v;
}
#else
// A group lies within one warp (TPR <= 32), so warp barriers suffice.
__device__ __forceinline__ float group_sum(float v, float* red) {
    const int l = threadIdx.x % TPR;
    float* r = red + (threadIdx.x - l);
    r[l] = v;
    __syncwarp();
    for (int half = TPR / 2; half > 0; half >>= 1) {
        if (l < half) r[l] += r[l + half];
        __syncwarp();
    }
    return r[0];
}
#endif

extern "C" __global__ void KERNEL_BOUNDS spmv_template(const int* RESTRICT row_ptr, const int* RESTRICT col_idx,
                                                      const float* RESTRICT vals, const float* RESTRICT x,
                                                      float* RESTRICT y, int rows) {
    __shared__ float red[BLOCK];
    const int row = blockIdx.x * RPB + threadIdx.x / TPR, l = threadIdx.x % TPR;
    int start = 0, end = 0;
    if (row < rows) {
        start = LOAD(row_ptr + row);
        end = LOAD(row_ptr + row + 1);
    }
    float s = 0.0f;
#if VEC4
    const int body = min((start + 3) & ~3, end);  // entries before it: scalar head
    ROW_LOOP
    for (int k = start + l; k < body; k += TPR) s += LOAD_STREAM(vals + k) * LOAD(x + LOAD_STREAM(col_idx + k));
    ROW_LOOP
    for (int q = body / 4 + l; q < end / 4; q += TPR) {
        const int4 c = LOAD_STREAM(reinterpret_cast<const int4*>(col_idx) + q);
        const float4 v = LOAD_STREAM(reinterpret_cast<const float4*>(vals) + q);
        s += v.x * LOAD(x + c.x) + v.y * LOAD(x + c.y) + v.z * LOAD(x + c.z) + v.w * LOAD(x + c.w);
    }
    ROW_LOOP
    for (int k = max(body, end & ~3) + l; k < end; k += TPR) s += LOAD_STREAM(vals + k) * LOAD(x + LOAD_STREAM(col_idx + k));
#else
    ROW_LOOP
    for (int k = start + l; k < end; k += TPR) s += LOAD_STREAM(vals + k) * LOAD(x + LOAD_STREAM(col_idx + k));
#endif
    s = group_sum(s, red);
    if (l == 0 && row < rows) y[row] = s;
}
