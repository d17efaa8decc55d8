/* fsr
[tunables]
BLOCK = [512, 256, 1024, 128]  # threads per block
GRID = [528, 264, 1056, 2112]  # most blocks launched; each strides over the vector
COPIES = [4, 1, 2, 8]          # sub-histograms per block with PRIVATE (warp w uses copy w % COPIES)
UNROLL_BY = [4, 2, 8]          # loads issued before their updates when UNROLL is on

[features]
PRIVATE = [0, 1]        # per-block histograms in shared memory, merged with one global atomic per bin (bins * COPIES <= 8192)
WARP_AGG = [0, 1]       # warp-aggregated atomics: lanes with the same bin found by __match_any_sync, one atomic for them
VEC4 = [0, 1]           # int4 loads of x (whole spans; the last, partial span stays scalar)
READONLY = [0, 1]       # __restrict__ pointers and __ldg loads of x
UNROLL = [0, 1]         # UNROLL_BY loads in flight per thread before their updates (else one at a time)
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__(BLOCK): registers bounded for the block size

[[launch]]
kernel = "zero_counts"
grid = ["cdiv(bins, 256)"]
block = ["256"]
args = ["counts", "bins"]

[[launch]]
kernel = "histogram_template"
grid = ["min(cdiv(n, BLOCK), GRID)"]
block = ["BLOCK"]
smem = "PRIVATE * 4 * min(bins * COPIES, 8192)"
args = ["x", "counts", "n", "bins"]
*/
// Feature template: histogram of int32 values in [0, bins). The first launch zeroes counts;
// the second has every block stride over x in spans of BLOCK * W * BATCH elements (W = 4 with
// VEC4, BATCH = UNROLL_BY with UNROLL), so loop trip counts are block-uniform and every lane of
// a warp reaches the warp-wide intrinsics. With PRIVATE, a block counts into shared memory
// (when bins fit; else it falls back to global atomics) and adds its non-zero bins to counts.
#define PRIV_CAP 8192  // ints of shared memory for sub-histograms; the header's smem matches
#if VEC4
#define W 4
#else
#define W 1
#endif
#if UNROLL
#define BATCH UNROLL_BY
#else
#define BATCH 1
#endif
#define SPAN (BLOCK * W * BATCH)
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

#if LAUNCH_BOUNDS
#define KERNEL_BOUNDS __launch_bounds__(BLOCK)
#else
#define KERNEL_BOUNDS
#endif

extern "C" __global__ void zero_counts(int* counts, int bins) {
    const int b = blockIdx.x * 256 + threadIdx.x;
    if (b < bins) counts[b] = 0;
}

// Count one value per lane; bin < 0 means this lane has none. Called by all 32 lanes together.
__device__ __forceinline__ void count(int* hist, int bin) {
#if WARP_AGG
    const unsigned peers = __match_any_sync(0xffffffffu, bin);
    if (bin >= 0 && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(hist + bin, __popc(peers));
#else
    if (bin >= 0) atomicAdd(hist + bin, 1);
#endif
}

__device__ __forceinline__ void count_span(const int* RESTRICT x, int off, int n, int* hist) {
    const int t = threadIdx.x;
#if VEC4
    if (off + SPAN <= n) {
        int4 q[BATCH];
FIXED_LOOP
        for (int b = 0; b < BATCH; ++b) q[b] = LOAD(reinterpret_cast<const int4*>(x + off) + b * BLOCK + t);
FIXED_LOOP
        for (int b = 0; b < BATCH; ++b) {
            count(hist, q[b].x);
            count(hist, q[b].y);
            count(hist, q[b].z);
            count(hist, q[b].w);
        }
        return;
    }
#endif
    int v[BATCH * W];
FIXED_LOOP
    for (int k = 0; k < BATCH * W; ++k) {
        const int i = off + k * BLOCK + t;
        v[k] = i < n ? LOAD(x + i) : -1;
    }
FIXED_LOOP
    for (int k = 0; k < BATCH * W; ++k) count(hist, v[k]);
}

extern "C" __global__ void KERNEL_BOUNDS histogram_template(const int* RESTRICT x, int* RESTRICT counts, int n,
                                                           int bins) {
    int* hist = counts;
#if PRIVATE
    extern __shared__ int hist_s[];
    const int copies = min(COPIES, PRIV_CAP / bins);
    if (copies > 0) {
        for (int i = threadIdx.x; i < copies * bins; i += BLOCK) hist_s[i] = 0;
        __syncthreads();
        hist = hist_s + (threadIdx.x / 32 % copies) * bins;
    }
#endif
    for (long long off = (long long)blockIdx.x * SPAN; off < n; off += (long long)gridDim.x * SPAN)
        count_span(x, (int)off, n, hist);
#if PRIVATE
    if (copies > 0) {
        __syncthreads();
        for (int b = threadIdx.x; b < bins; b += BLOCK) {
            int sum = 0;
            for (int c = 0; c < copies; ++c) sum += hist_s[c * bins + b];
            if (sum) atomicAdd(counts + b, sum);
        }
    }
#endif
}
