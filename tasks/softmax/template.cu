/* fsr
[tunables]
BLOCK = [256, 128, 512, 1024, 64]  # threads per block (a power of two)
UNROLL_BY = [4, 2, 8, 16]          # unroll factor of the strided row loops when UNROLL is on

[features]
WARP_ROW = [0, 1]      # one warp per row, BLOCK / 32 rows per block (else one block per row)
WARP_SHUFFLE = [0, 1]  # reductions with __shfl_xor_sync (else a shared-memory tree)
VEC4 = [0, 1]          # 4-element loads and stores (16 bytes, 8 with BF16) over the aligned middle of each row
ONLINE = [0, 1]        # max and sum in one pass, rescaling the running sum (else two passes)
SMEM_TILE = [0, 1]     # keep the row in shared memory between passes (32 KiB a block at most)
FAST_MATH = [0, 1]     # __expf and one reciprocal per row (else expf and a division per element)
READONLY = [0, 1]      # __restrict__ pointers and __ldg loads of x
UNROLL = [0, 1]        # unroll the strided row loops by UNROLL_BY (else not at all)

[[launch]]
kernel = "softmax_template"
grid = ["cdiv(rows, 1 + WARP_ROW * (BLOCK // 32 - 1))"]
block = ["BLOCK"]
# SMEM_TILE: rows per block * min(CACHE_FLOATS / rows per block, cols rounded up to 4, + 4) floats
smem = "SMEM_TILE * 4 * (1 + WARP_ROW * (BLOCK // 32 - 1)) * min(8192 // (1 + WARP_ROW * (BLOCK // 32 - 1)), cdiv(cols, 4) * 4 + 4)"
args = ["x", "y", "rows", "cols"]
*/
// Feature template: row-wise softmax, y = exp(x - max) / sum(exp(x - max)), of float rows into
// float, or with BF16 1 (a task's define: softmax_bf16) of bfloat16 rows into bfloat16. Every
// combination of the switches above is a correct kernel. A row's threads are consecutive: with
// WARP_ROW a row is one warp and no barrier spans more than a warp; without it the block is one row.
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
#define EXP(v) __expf(v)
#else
#define EXP(v) expf(v)
#endif

// Storage: x and y are elems in global memory, float or (BF16) bfloat16; every value is widened to
// float on load (exact), all arithmetic is float32, and each output is rounded to its type once,
// when it is stored. A "float4" is 4 consecutive elements, VEC_BYTES in global memory.
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
#if UNROLL
#define LOOP_UNROLL PRAGMA_UNROLL(UNROLL_BY)
#else
#define LOOP_UNROLL _Pragma("unroll 1")
#endif

// ---- reductions over the TPR threads of a row; every thread of the row gets the result -------

struct MaxSum {  // running max m and sum s of exp(x - m); an empty part is {-inf, 0}
    float m, s;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, 0.0f};  // both empty: exp(-inf - -inf) would be NaN
    return {m, a.s * EXP(a.m - m) + b.s * EXP(b.m - m)};
}

struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct MergeOp {
    __device__ MaxSum operator()(MaxSum a, MaxSum b) const { return merge(a, b); }
};

#if WARP_SHUFFLE
#define RED_SIZE 32  // one slot per warp

__device__ __forceinline__ float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ MaxSum shfl_xor(MaxSum v, int mask) { return {shfl_xor(v.m, mask), shfl_xor(v.s, mask)}; }

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

__device__ __forceinline__ float vmax(float v) { return v; }
__device__ __forceinline__ float sum_exp(float v, float m) { return EXP(v - m); }

__device__ __forceinline__ void online(MaxSum& a, float v) {
    if (v > a.m) {
        a.s = a.s * EXP(a.m - v) + 1.0f;
        a.m = v;
    } else {
        a.s += EXP(v - a.m);
    }
}

// y = exp(v - m) / sum; with FAST_MATH `s` holds 1 / sum.
__device__ __forceinline__ float normalise(float v, float m, float s) {
#if FAST_MATH
    return EXP(v - m) * s;
#else
    return EXP(v - m) / s;
#endif
}
__device__ __forceinline__ void put(elem* y, int c, float v, float m, float s) { st1(y + c, normalise(v, m, s)); }

#if VEC4
__device__ __forceinline__ float vmax(float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }
__device__ __forceinline__ float sum_exp(float4 v, float m) {
    return (EXP(v.x - m) + EXP(v.y - m)) + (EXP(v.z - m) + EXP(v.w - m));
}
__device__ __forceinline__ void online(MaxSum& a, float4 v) {
    const float m = fmaxf(a.m, vmax(v));
    a.s = a.s * EXP(a.m - m) + sum_exp(v, m);  // a.m = -inf at first: EXP gives 0, s was 0
    a.m = m;
}
__device__ __forceinline__ void put(elem* y, int c, float4 v, float m, float s) {
    float4 o;
    o.x = normalise(v.x, m, s);
    o.y = normalise(v.y, m, s);
    o.z = normalise(v.z, m, s);
    o.w = normalise(v.w, m, s);
    st4(y + c, o);
}
#endif

// The passes over a row, as functors for visit (NVRTC compiles no generic device lambdas).
struct MaxPass {
    float m;
    template <class V> __device__ __forceinline__ void operator()(int, V v) { m = fmaxf(m, vmax(v)); }
};
struct SumPass {
    float m, s;
    template <class V> __device__ __forceinline__ void operator()(int, V v) { s += sum_exp(v, m); }
};
struct OnlinePass {
    MaxSum acc;
    template <class V> __device__ __forceinline__ void operator()(int, V v) { online(acc, v); }
};
struct WritePass {
    elem* y;
    float m, s;
    template <class V> __device__ __forceinline__ void operator()(int c, V v) { put(y, c, v, m, s); }
};

extern "C" __global__ void KERNEL_BOUNDS softmax_template(const elem* RESTRICT x, elem* RESTRICT y, int rows, int cols) {
    const int r = blockIdx.x * RPB + threadIdx.x / TPR;
    if (r >= rows) return;  // whole rows only: a whole warp with WARP_ROW, never without
    const elem* xr = x + (size_t)r * cols;
    elem* yr = y + (size_t)r * cols;

    // head: columns before x's first VEC_BYTES boundary; then nvec groups of 4; then the tail.
    int head = cols, nvec = 0;
#if VEC4
    const size_t ax = (size_t)xr;
    if (((ax ^ (size_t)yr) & (VEC_BYTES - 1)) == 0 && (ax & (ELEM_BYTES - 1)) == 0) {  // y rows aligned like x rows
        head = min(cols, (int)(((VEC_BYTES - (ax & (VEC_BYTES - 1))) & (VEC_BYTES - 1)) / ELEM_BYTES));
        nvec = (cols - head) / 4;
    }
#endif
    Row row{xr, nullptr, (4 - (head & 3)) & 3, 0};
#if SMEM_TILE
    extern __shared__ __align__(16) float cache_mem[];
    row.cap = min(CACHE_FLOATS / RPB, (cols + 3) / 4 * 4 + 4);
    row.cache = cache_mem + (threadIdx.x / TPR) * row.cap;
#endif

#if ONLINE
    __shared__ MaxSum red[RED_SIZE];
    OnlinePass first{{-INFINITY, 0.0f}};
    visit(row, head, nvec, cols, true, first);
    const MaxSum total = row_reduce(first.acc, MergeOp(), MaxSum{-INFINITY, 0.0f}, red);
    const float m = total.m;
    float s = total.s;
#else
    __shared__ float red[RED_SIZE];
    MaxPass first{-INFINITY};
    visit(row, head, nvec, cols, true, first);
    const float m = row_reduce(first.m, MaxOp(), -INFINITY, red);
    SumPass second{m, 0.0f};
    visit(row, head, nvec, cols, false, second);
    float s = row_reduce(second.s, SumOp(), 0.0f, red);
#endif
#if FAST_MATH
    s = 1.0f / s;  // s >= 1: the max element contributes exp(0)
#endif
    WritePass out{yr, m, s};
    visit(row, head, nvec, cols, false, out);
}
