/* fsr
[tunables]
BLOCK = [256, 128, 512, 1024, 64]  # threads per block (a power of two)
UNROLL_BY = [4, 2, 8]              # unroll factor of the strided row loops when UNROLL is on

[features]
WARP_ROW = [0, 1]      # one warp per row, BLOCK / 32 rows per block (else one block per row)
WARP_SHUFFLE = [0, 1]  # reductions with __shfl_xor_sync (else a shared-memory tree)
VEC4 = [0, 1]          # 4-element loads and stores (16 bytes, 8 with BF16) over the aligned middle of each row
SMEM_TILE = [0, 1]     # keep the row in shared memory between passes (32 KiB a block at most)
FAST_MATH = [0, 1]     # rsqrtf (else 1 / sqrtf)
READONLY = [0, 1]      # __restrict__ pointers and __ldg loads of x and weight
UNROLL = [0, 1]        # unroll the strided row loops by UNROLL_BY (else not at all)

[[launch]]
kernel = "rmsnorm_template"
grid = ["cdiv(rows, 1 + WARP_ROW * (BLOCK // 32 - 1))"]
block = ["BLOCK"]
# SMEM_TILE: rows per block * min(CACHE_FLOATS / rows per block, cols rounded up to 4, + 4) floats
smem = "SMEM_TILE * 4 * (1 + WARP_ROW * (BLOCK // 32 - 1)) * min(8192 // (1 + WARP_ROW * (BLOCK // 32 - 1)), cdiv(cols, 4) * 4 + 4)"
args = ["x", "weight", "y", "rows", "cols", "eps"]
*/
// Feature template: RMS norm over each row, y = x / sqrt(mean(x^2) + eps) * weight, of float rows
// (and weight) into float, or with BF16 1 (a task's define: rmsnorm_bf16) of bfloat16 into
// bfloat16: one pass for the sum of squares, one that writes (it reads the row again from shared
// memory with SMEM_TILE). Every combination of the switches above is a correct kernel. A row's
// threads are consecutive: with WARP_ROW a row is one warp and no barrier spans more than a warp;
// without it the block is one row.
#ifndef BF16
#define BF16 0  // a variant's define (task.toml `template`), not a switch: it changes the buffers' type
#endif

#if WARP_ROW
#define TPR 32  // threads per row
#define ROW_SYNC() __syncwarp()
#else
#define TPR BLOCK
#define ROW_SYNC() __syncthreads()
#endif
#define RPB (BLOCK / TPR)   // rows per block
#define CACHE_FLOATS 8192   // SMEM_TILE budget per block; the header's smem expression matches
// Always bounded: every BLOCK up to 1024 must launch, so at most 65536 / BLOCK registers.
#define KERNEL_BOUNDS __launch_bounds__(BLOCK, 1)

#if READONLY
#define RESTRICT __restrict__
#define LOAD(p) __ldg(p)
#else
#define RESTRICT
#define LOAD(p) (*(p))
#endif

#if FAST_MATH
#define RSQRT(v) rsqrtf(v)
#else
#define RSQRT(v) (1.0f / sqrtf(v))
#endif

// Storage: x, weight and y are elems in global memory, float or (BF16) bfloat16; every value is
// widened to float on load (exact), all arithmetic is float32, and each output is rounded to its
// type once, when it is stored. A "float4" is 4 consecutive elements, VEC_BYTES in global memory.
#if BF16
#include <cuda_bf16.h>
typedef __nv_bfloat16 elem;
#define ELEM_BYTES 2
#define VEC_BYTES 8
__device__ __forceinline__ float ld1(const elem* p) { return __bfloat162float(LOAD(p)); }
__device__ __forceinline__ void st1(elem* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ float bf_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }
#if VEC4
__device__ __forceinline__ float4 ld4(const elem* p) {  // p: 8-byte aligned
    const uint2 u = LOAD(reinterpret_cast<const uint2*>(p));
    return make_float4(bf_lo(u.x), bf_hi(u.x), bf_lo(u.y), bf_hi(u.y));
}
__device__ __forceinline__ void st4(elem* p, float4 v) {  // p: 8-byte aligned
    const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    *reinterpret_cast<uint2*>(p) = make_uint2(reinterpret_cast<const unsigned&>(a), reinterpret_cast<const unsigned&>(b));
}
#endif
#else
typedef float elem;
#define ELEM_BYTES 4
#define VEC_BYTES 16
__device__ __forceinline__ float ld1(const elem* p) { return LOAD(p); }
__device__ __forceinline__ void st1(elem* p, float v) { *p = v; }
#if VEC4
__device__ __forceinline__ float4 ld4(const elem* p) { return LOAD(reinterpret_cast<const float4*>(p)); }  // 16-byte aligned
__device__ __forceinline__ void st4(elem* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
#endif
#endif

#define PRAGMA_TEXT(x) _Pragma(#x)
#define PRAGMA_UNROLL(n) PRAGMA_TEXT(unroll n)
#if BF16
// At 1024 threads a thread has 64 registers: unrolled by 8, the groups of 4 bfloat16 (and their
// weights) in flight spill, so the unroll is capped at 4 there.
#define UNROLL_N (BLOCK >= 1024 && UNROLL_BY > 4 ? 4 : UNROLL_BY)
#else
#define UNROLL_N UNROLL_BY
#endif
#if UNROLL
#define LOOP_UNROLL PRAGMA_UNROLL(UNROLL_N)
#else
#define LOOP_UNROLL _Pragma("unroll 1")
#endif

// ---- reductions over the TPR threads of a row; every thread of the row gets the result -------

struct SumOp {
    __device__ float operator()(float a, float b) const { return a + b; }
};

#if WARP_SHUFFLE
#define RED_SIZE 32  // one slot per warp

__device__ __forceinline__ float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }

template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
    for (int mask = 16; mask > 0; mask >>= 1) v = op(v, shfl_xor(v, mask));
    return v;
}

template <class T, class Op>
__device__ __forceinline__ T row_reduce(T v, Op op, T identity, T* red) {
    v = warp_reduce(v, op);
#if !WARP_ROW
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = warp_reduce(lane < BLOCK / 32 ? red[lane] : identity, op);
    __syncthreads();  // red is reused by the next reduction
#endif
    return v;
}
#else
#define RED_SIZE BLOCK  // one slot per thread; a row's slots are its threads'

template <class T, class Op>
__device__ __forceinline__ T row_reduce(T v, Op op, T identity, T* red) {
    const int t = threadIdx.x % TPR;
    T* r = red + (threadIdx.x - t);
    r[t] = v;
    ROW_SYNC();
    for (int half = TPR / 2; half > 0; half >>= 1) {
        if (t < half) r[t] = op(r[t], r[t + half]);
        ROW_SYNC();
    }
    v = r[0];
    ROW_SYNC();  // r[0] is overwritten by the next reduction
    return v;
}
#endif

// ---- one thread's share of a row ------------------------------------------------------------

// x of the row, and with SMEM_TILE its copy in shared memory, filled on the first pass: element
// c sits at cache[c + pad] when c + pad < cap (pad puts the float4 body on 16-byte boundaries
// of the float cache).
// Every thread reads back only elements it stored itself, so the cache needs no barrier.
struct Row {
    const elem* x;
    float* cache;
    int pad, cap;

    __device__ __forceinline__ float load(int c, bool fill) const {
#if SMEM_TILE
        const bool cached = c + pad < cap;
        if (cached && !fill) return cache[c + pad];
        const float v = ld1(x + c);
        if (cached) cache[c + pad] = v;
        return v;
#else
        return ld1(x + c);
#endif
    }

#if VEC4
    __device__ __forceinline__ float4 load4(int c, bool fill) const {
#if SMEM_TILE
        float4* slot = reinterpret_cast<float4*>(cache + c + pad);  // c + pad and cap: multiples of 4
        const bool cached = c + pad < cap;
        if (cached && !fill) return *slot;
        const float4 v = ld4(x + c);
        if (cached) *slot = v;
        return v;
#else
        return ld4(x + c);
#endif
    }
#endif
};

// Calls f(c, v) on each of this thread's elements: v is a float at column c in the head (the
// whole row without VEC4) and tail, a float4 at columns c..c+3 in the VEC_BYTES-aligned body.
template <class F>
__device__ __forceinline__ void visit(const Row& row, int head, int nvec, int cols, bool fill, F& f) {
    const int t = threadIdx.x % TPR;
    LOOP_UNROLL
    for (int c = t; c < head; c += TPR) f(c, row.load(c, fill));
#if VEC4
    LOOP_UNROLL
    for (int i = t; i < nvec; i += TPR) f(head + 4 * i, row.load4(head + 4 * i, fill));
    for (int c = head + 4 * nvec + t; c < cols; c += TPR) f(c, row.load(c, fill));
#endif
}

// ---- per-element work, for a float and for a float4 ----------------------------------------

__device__ __forceinline__ float sq(float v) { return v * v; }

// Output of one element: v * rstd * w.
struct Norm {
    const elem* w;
    float rstd;
    bool vec;  // weight is VEC_BYTES-aligned where the row's groups of 4 are

    __device__ __forceinline__ float at(float v, float wc) const { return v * rstd * wc; }
    __device__ __forceinline__ void put(elem* y, int c, float v) const { st1(y + c, at(v, ld1(w + c))); }
#if VEC4
    __device__ __forceinline__ void put(elem* y, int c, float4 v) const {
        const float4 wc = vec ? ld4(w + c) : make_float4(ld1(w + c), ld1(w + c + 1), ld1(w + c + 2), ld1(w + c + 3));
        st4(y + c, make_float4(at(v.x, wc.x), at(v.y, wc.y), at(v.z, wc.z), at(v.w, wc.w)));
    }
#endif
};

#if VEC4
__device__ __forceinline__ float sq(float4 v) { return (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w); }
#endif

// The passes over a row, as functors for visit (NVRTC compiles no generic device lambdas).
struct SqPass {
    float s;
    template <class V> __device__ __forceinline__ void operator()(int, V v) { s += sq(v); }
};
struct WritePass {
    elem* y;
    Norm norm;
    template <class V> __device__ __forceinline__ void operator()(int c, V v) { norm.put(y, c, v); }
};

extern "C" __global__ void KERNEL_BOUNDS rmsnorm_template(const elem* RESTRICT x, const elem* RESTRICT weight,
                                                          elem* RESTRICT y, int rows, int cols, float eps) {
    const int r = blockIdx.x * RPB + threadIdx.x / TPR;
    if (r >= rows) return;  // whole rows only: a whole warp with WARP_ROW, never without
    const elem* xr = x + (size_t)r * cols;
    elem* yr = y + (size_t)r * cols;

    // head: columns before x's first VEC_BYTES boundary; then nvec groups of 4; then the tail.
    int head = cols, nvec = 0;
    bool wvec = false;
#if VEC4
    const size_t ax = (size_t)xr;
    if (((ax ^ (size_t)yr) & (VEC_BYTES - 1)) == 0 && (ax & (ELEM_BYTES - 1)) == 0) {  // y rows aligned like x rows
        head = min(cols, (int)(((VEC_BYTES - (ax & (VEC_BYTES - 1))) & (VEC_BYTES - 1)) / ELEM_BYTES));
        nvec = (cols - head) / 4;
        wvec = ((ax ^ (size_t)weight) & (VEC_BYTES - 1)) == 0;
    }
#endif
    Row row{xr, nullptr, (4 - (head & 3)) & 3, 0};
#if SMEM_TILE
    extern __shared__ __align__(16) float cache_mem[];
    row.cap = min(CACHE_FLOATS / RPB, (cols + 3) / 4 * 4 + 4);
    row.cache = cache_mem + (threadIdx.x / TPR) * row.cap;
#endif

    __shared__ float red[RED_SIZE];
    SqPass first{0.0f};
    visit(row, head, nvec, cols, true, first);
    const float ms = row_reduce(first.s, SumOp(), 0.0f, red) / cols;
    WritePass out{yr, Norm{weight, RSQRT(ms + eps), wvec}};
    visit(row, head, nvec, cols, false, out);
}
