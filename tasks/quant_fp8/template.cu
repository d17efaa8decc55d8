/* fsr
[tunables]
BLOCK = [256, 128, 512, 1024, 64]      # threads per block (a power of two)
ROWS_PER_BLOCK = [1, 2, 4, 8, 16, 32]  # rows a block quantises, BLOCK / ROWS_PER_BLOCK threads each

[features]
VEC4 = [0, 1]          # 16-byte loads of 8 bfloat16 and 8-byte stores of 8 e4m3 (paired conversions)
WARP_SHUFFLE = [0, 1]  # the row maximum with __shfl_xor_sync (else a shared-memory tree)
SMEM_TILE = [0, 1]     # keep the row's bfloat16 in shared memory for the second pass (16 KiB a block)
READONLY = [0, 1]      # __restrict__ pointers and __ldg loads of x
FAST_MATH = [0, 1]     # multiply by the scale's reciprocal (__frcp_rn) instead of dividing by it
UNROLL = [0, 1]        # unroll the strided row loops by 4 (else not at all)

[[launch]]
kernel = "quant_fp8_template"
grid = ["cdiv(rows, ROWS_PER_BLOCK)"]
block = ["BLOCK"]
args = ["x", "q", "scale", "rows", "cols"]
*/
// Feature template: per-row quantisation of bfloat16 to e4m3, scale = max |x| / 448 (1 for a row
// of zeros), q = x / scale rounded to nearest even and saturated. Every combination of the
// switches above is a correct kernel. A row's TPR threads are consecutive; no thread returns
// early (a block's last rows may lie past `rows`: their threads take part in the barriers only).

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#define RPB ROWS_PER_BLOCK
#define TPR (BLOCK / RPB)  // threads per row, a power of two from 2 to 1024
#define E4M3_MAX 448.0f
#define CACHE_BYTES 16384  // SMEM_TILE: one bench row of bfloat16, shared by the block's rows
#define ROW_CACHE (CACHE_BYTES / RPB + 32)  // a row's share, and the two 16-byte slots the layout skips
#define KERNEL_BOUNDS __launch_bounds__(BLOCK, 1)

#if READONLY
#define RESTRICT __restrict__
#define LOAD(p) __ldg(p)
#else
#define RESTRICT
#define LOAD(p) (*(p))
#endif

#if UNROLL
#define LOOP_UNROLL _Pragma("unroll 4")
#else
#define LOOP_UNROLL _Pragma("unroll 1")
#endif

typedef __nv_bfloat16 elem;
typedef unsigned short bits16;  // a bfloat16's bits, as the shared-memory copy holds them

__device__ __forceinline__ float widen(bits16 b) { return __uint_as_float((unsigned)b << 16); }
__device__ __forceinline__ bits16 bits_of(elem v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ __nv_fp8_storage_t to_e4m3(float v) { return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3); }

// Each thread's share of a row: the head (columns before x's first 16-byte boundary, or the
// whole row without VEC4), nvec chunks of 8 from there, and the tail. With SMEM_TILE the first
// pass also stores what it loads in the row's part of the cache, while it fits, and the second
// pass reads it back: the head's scalars (fewer than 8) at their column's 2 bytes, chunk i at
// the 16 bytes after i + 1 such slots, and the tail's scalars 8 columns further than their own
// (clear of the last chunk). A thread reads back only what it stored, so no barrier is needed.
struct Row {
    const elem* x;
    __nv_fp8_storage_t* q;
    int head, nvec, cols, t;
    unsigned char* cache;  // ROW_CACHE bytes of shared memory, or null

    __device__ __forceinline__ bits16 load(int c, bool fill) const {
#if SMEM_TILE
        const int at = c < head ? c : c + 8;  // without VEC4 head is cols: every column at its own
        bits16* slot = reinterpret_cast<bits16*>(cache) + at;
        const bool cached = 2 * (at + 1) <= ROW_CACHE;
        if (cached && !fill) return *slot;
        const bits16 v = bits_of(LOAD(x + c));
        if (cached) *slot = v;
        return v;
#else
        return bits_of(LOAD(x + c));
#endif
    }
#if VEC4
    __device__ __forceinline__ uint4 load8(int i, bool fill) const {  // columns head + 8i .. + 7
        const uint4* src = reinterpret_cast<const uint4*>(x + head) + i;
#if SMEM_TILE
        uint4* slot = reinterpret_cast<uint4*>(cache) + i + 1;
        const bool cached = 16 * (i + 2) <= ROW_CACHE;
        if (cached && !fill) return *slot;
        const uint4 v = LOAD(src);
        if (cached) *slot = v;
        return v;
#else
        return LOAD(src);
#endif
    }
#endif
};

__device__ __forceinline__ float absmax8(float m, unsigned w) {
    return fmaxf(m, fmaxf(fabsf(__uint_as_float(w << 16)), fabsf(__uint_as_float(w & 0xffff0000u))));
}

__device__ float row_absmax(const Row& row) {
    float m = 0.0f;
    LOOP_UNROLL
    for (int c = row.t; c < row.head; c += TPR) m = fmaxf(m, fabsf(widen(row.load(c, true))));
#if VEC4
    LOOP_UNROLL
    for (int i = row.t; i < row.nvec; i += TPR) {
        const uint4 v = row.load8(i, true);
        m = absmax8(absmax8(absmax8(absmax8(m, v.x), v.y), v.z), v.w);
    }
    for (int c = row.head + 8 * row.nvec + row.t; c < row.cols; c += TPR) m = fmaxf(m, fabsf(widen(row.load(c, true))));
#endif
    return m;
}

// ---- the maximum over a row's TPR threads; every thread of the row gets it ------------------

#if WARP_SHUFFLE
__device__ __forceinline__ float warp_max(float v, int width) {
    for (int mask = width / 2; mask > 0; mask >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, mask));
    return v;
}

__device__ __forceinline__ float reduce_max(float v, float* red) {
#if TPR <= 32
    return warp_max(v, TPR);  // xor masks below TPR stay within the row's lanes
#else
    v = warp_max(v, 32);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, first = warp - warp % (TPR / 32);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_max(lane < TPR / 32 ? red[first + lane] : 0.0f, 32);
#endif
}
#define RED_SIZE (BLOCK / 32)
#else
__device__ __forceinline__ float reduce_max(float v, float* red) {
    const int t = threadIdx.x % TPR;
    float* r = red + (threadIdx.x - t);
    r[t] = v;
    __syncthreads();
    for (int half = TPR / 2; half > 0; half >>= 1) {
        if (t < half) r[t] = fmaxf(r[t], r[t + half]);
        __syncthreads();
    }
    return r[0];
}
#define RED_SIZE BLOCK
#endif

// ---- the conversion pass --------------------------------------------------------------------

struct Quant {
#if FAST_MATH
    float inv;
    __device__ __forceinline__ float apply(float v) const { return v * inv; }
#else
    float s;
    __device__ __forceinline__ float apply(float v) const { return v / s; }
#endif
};

#if VEC4
// Two bfloat16 (one 32-bit word) to two e4m3 in one conversion; the lower column in the low byte.
__device__ __forceinline__ unsigned pair(unsigned w, const Quant& k) {
    const float2 f = make_float2(k.apply(__uint_as_float(w << 16)), k.apply(__uint_as_float(w & 0xffff0000u)));
    return __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, __NV_E4M3);
}
#endif

__device__ void row_convert(const Row& row, const Quant& k) {
    LOOP_UNROLL
    for (int c = row.t; c < row.head; c += TPR) row.q[c] = to_e4m3(k.apply(widen(row.load(c, false))));
#if VEC4
    uint2* dst = reinterpret_cast<uint2*>(row.q + row.head);
    LOOP_UNROLL
    for (int i = row.t; i < row.nvec; i += TPR) {
        const uint4 v = row.load8(i, false);
        dst[i] = make_uint2(pair(v.x, k) | pair(v.y, k) << 16, pair(v.z, k) | pair(v.w, k) << 16);
    }
    for (int c = row.head + 8 * row.nvec + row.t; c < row.cols; c += TPR) row.q[c] = to_e4m3(k.apply(widen(row.load(c, false))));
#endif
}

extern "C" __global__ void KERNEL_BOUNDS quant_fp8_template(const elem* RESTRICT x, __nv_fp8_e4m3* RESTRICT q,
                                                            float* RESTRICT scale, int rows, int cols) {
    const int local = threadIdx.x / TPR, r = blockIdx.x * RPB + local;
    const bool valid = r < rows;
    const size_t offset = (size_t)(valid ? r : 0) * cols;
    Row row{x + offset, reinterpret_cast<__nv_fp8_storage_t*>(q) + offset, valid ? cols : 0, 0, valid ? cols : 0,
            (int)(threadIdx.x % TPR), nullptr};
#if VEC4
    // 16-byte chunks of x from its first 16-byte boundary, when q's bytes there are 8-byte aligned
    const size_t ax = (size_t)row.x, aq = (size_t)row.q;
    const int head = (int)(((16 - (ax & 15)) & 15) / 2);
    if (valid && (ax & 1) == 0 && ((aq + head) & 7) == 0 && head < cols) {
        row.head = head;
        row.nvec = (cols - head) / 8;
    }
#endif
#if SMEM_TILE
    __shared__ __align__(16) unsigned char cache[RPB][ROW_CACHE];
    row.cache = cache[local];
#endif
    __shared__ float red[RED_SIZE];
    const float amax = reduce_max(row_absmax(row), red);
    if (!valid) return;  // past the last barrier
    const float s = amax > 0.0f ? amax / E4M3_MAX : 1.0f;  // a row of zeros keeps scale 1 (and q 0)
    if (row.t == 0) scale[r] = s;
#if FAST_MATH
    row_convert(row, Quant{__frcp_rn(s)});
#else
    row_convert(row, Quant{s});
#endif
}
