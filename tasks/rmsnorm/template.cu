/* fsr
[tunables]
BLOCK = [256, 128, 512, 1024, 64]  # threads per block (a power of two)
UNROLL_BY = [4, 2, 8]              # unroll factor of the strided row loops with UNROLL; packs a thread loads at once with CHUNK
REG_VECS = [8, 16, 4]              # with REG_ROW: packs of its row a thread holds in registers (capped by its register share)
LEAN_THREADS = [1536, 2048, 1024]  # with LEAN: threads an SM its kernel must fit (launch bounds): 40, 32 or 64 registers

[features]
WARP_ROW = [0, 1]      # one warp per row, BLOCK / 32 rows per block (else one block per row)
WARP_SHUFFLE = [0, 1]  # reductions with __shfl_xor_sync (else a shared-memory tree)
VEC4 = [0, 1]          # packs of 4 elements (16-byte loads and stores, 8 with BF16) over the aligned middle of each row
SMEM_TILE = [0, 1]     # keep the row in shared memory between passes (32 KiB a block at most)
FAST_MATH = [0, 1]     # rsqrtf (else 1 / sqrtf)
READONLY = [0, 1]      # __restrict__ pointers and __ldg loads of x and weight
UNROLL = [0, 1]        # unroll the strided row loops by UNROLL_BY (else not at all)
EVICT_HINT = [0, 1]    # L2 eviction priorities: x's first read evict_last, its re-read evict_first, weight evict_last
STORE_HINT = [0, 1]    # with EVICT_HINT, y's stores evict_first too (torch.compile's Triton kernels store y plainly)
CHUNK = [0, 1]         # each pass walks the row in chunks of UNROLL_BY packs a thread, all loaded before any is used
REG_ROW = [0, 1]       # a row whose middle fits in REG_VECS packs a thread (LEAN: UNROLL_BY) is held in registers: x read once, never re-read
WIDE = [0, 1]          # with VEC4, packs of 8 elements: one 16-byte access with BF16 (else 8 bytes), two with float
LEAN = [0, 1]          # with VEC4, a kernel of its own for rows of whole packs, a block a row (torch.compile's shape)

[[launch]]
kernel = "rmsnorm_template"
when = "LEAN == 0 or VEC4 == 0 or WARP_ROW == 1 or cols % 8 != 0"
grid = ["cdiv(rows, 1 + WARP_ROW * (BLOCK // 32 - 1))"]
block = ["BLOCK"]
# SMEM_TILE: rows per block * min(CACHE_FLOATS / rows per block, cols rounded up to 4, + 4) floats
smem = "SMEM_TILE * 4 * (1 + WARP_ROW * (BLOCK // 32 - 1)) * min(8192 // (1 + WARP_ROW * (BLOCK // 32 - 1)), cdiv(cols, 4) * 4 + 4)"
args = ["x", "weight", "y", "rows", "cols", "eps"]

[[launch]]
kernel = "rmsnorm_lean"
when = "LEAN == 1 and VEC4 == 1 and WARP_ROW == 0 and cols % 8 == 0"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "weight", "y", "rows", "cols", "eps"]
*/
// Feature template: RMS norm over each row, y = x / sqrt(mean(x^2) + eps) * weight, of float rows
// (and weight) into float, or with BF16 1 (a task's define: rmsnorm_bf16) of bfloat16 into
// bfloat16: one pass for the sum of squares, one that writes (it reads the row again from shared
// memory with SMEM_TILE, from registers with REG_ROW where the row fits, else from global memory,
// where the L2 usually still holds it). Every combination of the switches above is a correct
// kernel. A row's threads are consecutive: with WARP_ROW a row is one warp and no barrier spans
// more than a warp; without it the block is one row.
//
// Why the newer switches should pay on an H200 (4.8 TB/s of HBM3e, a 50 MB L2, 132 SMs): at the
// bench size x is 256 MiB (128 with BF16), five times the L2, so the write pass's re-read of a row
// hits only if the row's lines outlived the other rows streaming through meanwhile.
// - EVICT_HINT marks x's first read evict_last and its last read evict_first, as torch.compile's
//   Triton kernels do: the rows in flight stay in the L2 for their re-read while finished rows
//   leave first, so DRAM sees x once. Those kernels store y plainly; STORE_HINT stores it
//   evict_first too (never read back). The hints act within one launch only: fsr's timed runs
//   start after an L2 flush, and certification sets the candidate's lines back to normal
//   priority before its flush.
// - CHUNK loads a chunk of packs into registers before using any: the loads are in flight
//   together (memory-level parallelism) even in the write pass, where stores of y between them
//   would otherwise keep the compiler from hoisting loads that might alias (without __restrict__).
// - REG_ROW reads x from DRAM once and never again, neither from the L2 nor from shared memory:
//   at 8192 columns and 256 threads a thread holds 8 float4s (32 registers), and a block needs no
//   shared memory beyond its reduction, so occupancy stays high.
// - WIDE gives BF16 16-byte accesses (half the load instructions of VEC4's 8 bytes), as Triton's
//   vectorisation does; with float, 8 elements a pack are two 16-byte accesses a thread.
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

// A pack: PACK consecutive elements, widened to float. With VEC4 the row's middle is read and
// written a pack at a time through vector accesses (PACK * ELEM_BYTES bytes, in 16-byte pieces).
#if VEC4
#define PACK (4 * (1 + WIDE))
#else
#define PACK 1
#endif
struct Pack { float v[PACK]; };

// Registers a thread may spend on packs held at once (CHUNK's chunk, REG_ROW's row): half of its
// share at BLOCK threads (launch bounds BLOCK, 1), a quarter at 1024 threads (16 of 64 registers:
// addresses, policies and the weights of a pack need the rest), so nothing spills.
#define HOLD_FLOATS (BLOCK >= 1024 ? 16 : 65536 / BLOCK / 2)
#define CAPPED(n) ((n) * PACK <= HOLD_FLOATS ? (n) : (HOLD_FLOATS / PACK > 0 ? HOLD_FLOATS / PACK : 1))
#define CHUNK_N CAPPED(UNROLL_BY)
#define REG_N CAPPED(REG_VECS)

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

// ---- global memory: raw 2-, 4-, 8- and 16-byte accesses, with or without L2 eviction hints ----

// A load's next use: KEEP (read again in this launch: x's first pass, weight) or LAST (never
// again: x's last read, y's store).
#define KEEP 0
#define LAST 1

#if EVICT_HINT
// Policies for .L2::cache_hint accesses (createpolicy, sm_80+), made once a thread; the L1
// priority matches (Triton's lowering of eviction_policy does the same).
struct Hints {
    unsigned long long keep, last;
};
__device__ __forceinline__ Hints make_hints() {
    Hints h;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(h.keep));
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(h.last));
    return h;
}
#if READONLY
#define LD_GLOBAL "ld.global.nc"
#else
#define LD_GLOBAL "ld.global"
#endif
#define LD_KEEP LD_GLOBAL ".L1::evict_last.L2::cache_hint"
#define LD_LAST LD_GLOBAL ".L1::evict_first.L2::cache_hint"
#define ST_LAST "st.global.L1::evict_first.L2::cache_hint"
// Loads read memory only fsr's other buffers never alias (x, weight), so they are not volatile:
// the compiler may schedule them freely, as with __restrict__.
template <int USE> __device__ __forceinline__ unsigned short ld16(const unsigned short* p, const Hints& h) {
    unsigned short v;
    if (USE == KEEP) asm(LD_KEEP ".b16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(h.keep));
    else asm(LD_LAST ".b16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(h.last));
    return v;
}
template <int USE> __device__ __forceinline__ unsigned ld32(const unsigned* p, const Hints& h) {
    unsigned v;
    if (USE == KEEP) asm(LD_KEEP ".b32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(h.keep));
    else asm(LD_LAST ".b32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(h.last));
    return v;
}
#if STORE_HINT
__device__ __forceinline__ void st16(unsigned short* p, unsigned short v, const Hints& h) {
    asm volatile(ST_LAST ".b16 [%0], %1, %2;" :: "l"(p), "h"(v), "l"(h.last) : "memory");
}
__device__ __forceinline__ void st32(unsigned* p, unsigned v, const Hints& h) {
    asm volatile(ST_LAST ".b32 [%0], %1, %2;" :: "l"(p), "r"(v), "l"(h.last) : "memory");
}
#else
__device__ __forceinline__ void st16(unsigned short* p, unsigned short v, const Hints&) { *p = v; }
__device__ __forceinline__ void st32(unsigned* p, unsigned v, const Hints&) { *p = v; }
#endif
#if VEC4
template <int USE> __device__ __forceinline__ uint2 ld64(const uint2* p, const Hints& h) {
    uint2 v;
    if (USE == KEEP) asm(LD_KEEP ".v2.b32 {%0, %1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(h.keep));
    else asm(LD_LAST ".v2.b32 {%0, %1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(h.last));
    return v;
}
template <int USE> __device__ __forceinline__ uint4 ld128(const uint4* p, const Hints& h) {
    uint4 v;
    if (USE == KEEP)
        asm(LD_KEEP ".v4.b32 {%0, %1, %2, %3}, [%4], %5;" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(h.keep));
    else
        asm(LD_LAST ".v4.b32 {%0, %1, %2, %3}, [%4], %5;" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(h.last));
    return v;
}
#if STORE_HINT
__device__ __forceinline__ void st64(uint2* p, uint2 v, const Hints& h) {
    asm volatile(ST_LAST ".v2.b32 [%0], {%1, %2}, %3;" :: "l"(p), "r"(v.x), "r"(v.y), "l"(h.last) : "memory");
}
__device__ __forceinline__ void st128(uint4* p, uint4 v, const Hints& h) {
    asm volatile(ST_LAST ".v4.b32 [%0], {%1, %2, %3, %4}, %5;" :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w),
                 "l"(h.last) : "memory");
}
#else
__device__ __forceinline__ void st64(uint2* p, uint2 v, const Hints&) { *p = v; }
__device__ __forceinline__ void st128(uint4* p, uint4 v, const Hints&) { *p = v; }
#endif
#endif
#else
struct Hints {};
__device__ __forceinline__ Hints make_hints() { return Hints{}; }
template <int USE> __device__ __forceinline__ unsigned short ld16(const unsigned short* p, const Hints&) { return LOAD(p); }
template <int USE> __device__ __forceinline__ unsigned ld32(const unsigned* p, const Hints&) { return LOAD(p); }
__device__ __forceinline__ void st16(unsigned short* p, unsigned short v, const Hints&) { *p = v; }
__device__ __forceinline__ void st32(unsigned* p, unsigned v, const Hints&) { *p = v; }
#if VEC4
template <int USE> __device__ __forceinline__ uint2 ld64(const uint2* p, const Hints&) { return LOAD(p); }
template <int USE> __device__ __forceinline__ uint4 ld128(const uint4* p, const Hints&) { return LOAD(p); }
__device__ __forceinline__ void st64(uint2* p, uint2 v, const Hints&) { *p = v; }
__device__ __forceinline__ void st128(uint4* p, uint4 v, const Hints&) { *p = v; }
#endif
#endif

// ---- elements and packs: x, weight and y are elems in global memory, float or (BF16) bfloat16;
// every value is widened to float on load (exact), all arithmetic is float32, and each output is
// rounded to its type once, when it is stored. A pack sits at a PACK_ALIGN-aligned address.
#if BF16
#include <cuda_bf16.h>
typedef __nv_bfloat16 elem;
#define ELEM_BYTES 2
__device__ __forceinline__ float bf_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }
__device__ __forceinline__ unsigned bf_pair(float a, float b) {  // a in the low half, each rounded once
    const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return reinterpret_cast<const unsigned&>(v);
}
template <int USE> __device__ __forceinline__ float ld1(const elem* p, const Hints& h) {
    return __uint_as_float((unsigned)ld16<USE>(reinterpret_cast<const unsigned short*>(p), h) << 16);
}
__device__ __forceinline__ void st1(elem* p, float v, const Hints& h) {
    st16(reinterpret_cast<unsigned short*>(p), __bfloat16_as_ushort(__float2bfloat16_rn(v)), h);
}
#if VEC4
#define PACK_ALIGN (PACK * 2)  // one access a pack: 8 or (WIDE) 16 bytes
// A pack's raw bits (half the registers of its floats: what LEAN's held row keeps), widened on use.
#if WIDE
typedef uint4 Raw;
template <int USE> __device__ __forceinline__ Raw ldraw(const elem* p, const Hints& h) {
    return ld128<USE>(reinterpret_cast<const uint4*>(p), h);
}
__device__ __forceinline__ Pack widen(const Raw& u) {
    return Pack{{bf_lo(u.x), bf_hi(u.x), bf_lo(u.y), bf_hi(u.y), bf_lo(u.z), bf_hi(u.z), bf_lo(u.w), bf_hi(u.w)}};
}
#else
typedef uint2 Raw;
template <int USE> __device__ __forceinline__ Raw ldraw(const elem* p, const Hints& h) {
    return ld64<USE>(reinterpret_cast<const uint2*>(p), h);
}
__device__ __forceinline__ Pack widen(const Raw& u) { return Pack{{bf_lo(u.x), bf_hi(u.x), bf_lo(u.y), bf_hi(u.y)}}; }
#endif
template <int USE> __device__ __forceinline__ Pack ldp(const elem* p, const Hints& h) { return widen(ldraw<USE>(p, h)); }
__device__ __forceinline__ void stp(elem* p, const Pack& v, const Hints& h) {
#if WIDE
    st128(reinterpret_cast<uint4*>(p),
          make_uint4(bf_pair(v.v[0], v.v[1]), bf_pair(v.v[2], v.v[3]), bf_pair(v.v[4], v.v[5]), bf_pair(v.v[6], v.v[7])), h);
#else
    st64(reinterpret_cast<uint2*>(p), make_uint2(bf_pair(v.v[0], v.v[1]), bf_pair(v.v[2], v.v[3])), h);
#endif
}
#endif
#else
typedef float elem;
#define ELEM_BYTES 4
template <int USE> __device__ __forceinline__ float ld1(const elem* p, const Hints& h) {
    return __uint_as_float(ld32<USE>(reinterpret_cast<const unsigned*>(p), h));
}
__device__ __forceinline__ void st1(elem* p, float v, const Hints& h) { st32(reinterpret_cast<unsigned*>(p), __float_as_uint(v), h); }
#if VEC4
#define PACK_ALIGN 16  // 16-byte accesses: one a pack, two with WIDE
template <int USE> __device__ __forceinline__ Pack ldp(const elem* p, const Hints& h) {
    Pack r;
    PRAGMA_UNROLL(PACK / 4)
    for (int q = 0; q < PACK / 4; ++q) {
        const uint4 u = ld128<USE>(reinterpret_cast<const uint4*>(p) + q, h);
        r.v[4 * q] = __uint_as_float(u.x), r.v[4 * q + 1] = __uint_as_float(u.y);
        r.v[4 * q + 2] = __uint_as_float(u.z), r.v[4 * q + 3] = __uint_as_float(u.w);
    }
    return r;
}
__device__ __forceinline__ void stp(elem* p, const Pack& v, const Hints& h) {
    PRAGMA_UNROLL(PACK / 4)
    for (int q = 0; q < PACK / 4; ++q)
        st128(reinterpret_cast<uint4*>(p) + q, make_uint4(__float_as_uint(v.v[4 * q]), __float_as_uint(v.v[4 * q + 1]),
                                                          __float_as_uint(v.v[4 * q + 2]), __float_as_uint(v.v[4 * q + 3])), h);
}
#endif
#endif
#if !VEC4
#define PACK_ALIGN ELEM_BYTES
template <int USE> __device__ __forceinline__ Pack ldp(const elem* p, const Hints& h) { return Pack{{ld1<USE>(p, h)}}; }
__device__ __forceinline__ void stp(elem* p, const Pack& v, const Hints& h) { st1(p, v.v[0], h); }
#endif
#if !(BF16 && VEC4)  // a pack's raw bits are its floats
typedef Pack Raw;
template <int USE> __device__ __forceinline__ Raw ldraw(const elem* p, const Hints& h) { return ldp<USE>(p, h); }
__device__ __forceinline__ const Pack& widen(const Raw& v) { return v; }
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
// c sits at cache[c + pad] when c + pad < cap, a pack when all of it fits (pad puts the packs on
// 16-byte boundaries of the float cache). Every thread reads back only elements it stored
// itself, so the cache needs no barrier. USE: the first pass (KEEP) fills, the last (LAST) reads;
// a cached element's one global read is its last (LAST's hint).
struct Row {
    const elem* x;
    float* cache;
    int pad, cap;
    Hints hints;

    template <int USE> __device__ __forceinline__ float load(int c) const {
#if SMEM_TILE
        const bool cached = c + pad < cap;
        if (cached && USE == LAST) return cache[c + pad];
        if (!cached) return ld1<USE>(x + c, hints);
        const float v = ld1<LAST>(x + c, hints);  // its only read from global memory
        cache[c + pad] = v;
        return v;
#else
        return ld1<USE>(x + c, hints);
#endif
    }

    template <int USE> __device__ __forceinline__ Pack loadp(int c) const {
#if SMEM_TILE
        float* slot = cache + c + pad;  // c + pad and cap: multiples of 4 with VEC4
        const bool cached = c + pad + PACK <= cap;
        Pack v;
        if (cached && USE == LAST) {
            PRAGMA_UNROLL(PACK)
            for (int q = 0; q < PACK; ++q) v.v[q] = slot[q];
            return v;
        }
        if (!cached) return ldp<USE>(x + c, hints);
        v = ldp<LAST>(x + c, hints);  // its only read from global memory
        PRAGMA_UNROLL(PACK)
        for (int q = 0; q < PACK; ++q) slot[q] = v.v[q];
        return v;
#else
        return ldp<USE>(x + c, hints);
#endif
    }
};

// Calls f(c, v) on each of this thread's elements: v is a float at column c in the head and
// tail, a Pack at columns c..c+PACK-1 in the body (nvec packs from column head; with VEC4 the
// head ends at x's first PACK_ALIGN boundary, without it the head is empty and a pack is one
// element). CHUNK loads CHUNK_N packs, a stride of TPR apart, before calling f on any.
template <int USE, class F>
__device__ __forceinline__ void visit(const Row& row, int head, int nvec, int cols, F& f) {
    const int t = threadIdx.x % TPR;
    for (int c = t; c < head; c += TPR) f(c, row.load<USE>(c));
#if CHUNK
    for (int i0 = t; i0 < nvec; i0 += CHUNK_N * TPR) {
        Pack v[CHUNK_N];
        PRAGMA_UNROLL(CHUNK_N)
        for (int k = 0; k < CHUNK_N; ++k)
            if (i0 + k * TPR < nvec) v[k] = row.loadp<USE>(head + PACK * (i0 + k * TPR));
        PRAGMA_UNROLL(CHUNK_N)
        for (int k = 0; k < CHUNK_N; ++k)
            if (i0 + k * TPR < nvec) f(head + PACK * (i0 + k * TPR), v[k]);
    }
#else
    LOOP_UNROLL
    for (int i = t; i < nvec; i += TPR) f(head + PACK * i, row.loadp<USE>(head + PACK * i));
#endif
    for (int c = head + PACK * nvec + t; c < cols; c += TPR) f(c, row.load<USE>(c));
}

// ---- per-element work, for a float and for a pack -------------------------------------------

__device__ __forceinline__ float sq(float v) { return v * v; }
__device__ __forceinline__ float sq(const Pack& v) {
    float s = 0.0f;
    PRAGMA_UNROLL(PACK)
    for (int q = 0; q < PACK; ++q) s = fmaf(v.v[q], v.v[q], s);
    return s;
}

// Output of one element: v * rstd * w.
struct Norm {
    const elem* w;
    float rstd;
    bool vec;  // weight is PACK_ALIGN-aligned where the row's packs are
    Hints hints;

    __device__ __forceinline__ float at(float v, float wc) const { return v * rstd * wc; }
    __device__ __forceinline__ void put(elem* y, int c, float v) const { st1(y + c, at(v, ld1<KEEP>(w + c, hints)), hints); }
    __device__ __forceinline__ void put(elem* y, int c, const Pack& v) const {
        Pack wc;
        if (vec) {
            wc = ldp<KEEP>(w + c, hints);
        } else {
            PRAGMA_UNROLL(PACK)
            for (int q = 0; q < PACK; ++q) wc.v[q] = ld1<KEEP>(w + c + q, hints);
        }
        PRAGMA_UNROLL(PACK)
        for (int q = 0; q < PACK; ++q) wc.v[q] = at(v.v[q], wc.v[q]);
        stp(y + c, wc, hints);
    }
};

// The passes over a row, as functors for visit (NVRTC compiles no generic device lambdas).
struct SqPass {
    float s;
    template <class V> __device__ __forceinline__ void operator()(int, const V& v) { s += sq(v); }
};
struct WritePass {
    elem* y;
    Norm norm;
    template <class V> __device__ __forceinline__ void operator()(int c, const V& v) { norm.put(y, c, v); }
};

#if REG_ROW
// The row's body held in registers, REG_N packs a thread (pack i = t + k * TPR in held[k]), when
// nvec <= REG_N * TPR: read once, with the last-use hint, since nothing reads it again.
struct Held {
    Pack v[REG_N];
};
__device__ __forceinline__ void hold(const Row& row, int head, int nvec, Held& held, float& s) {
    const int t = threadIdx.x % TPR;
    PRAGMA_UNROLL(REG_N)
    for (int k = 0; k < REG_N; ++k)
        if (t + k * TPR < nvec) held.v[k] = ldp<LAST>(row.x + head + PACK * (t + k * TPR), row.hints);
    PRAGMA_UNROLL(REG_N)
    for (int k = 0; k < REG_N; ++k)
        if (t + k * TPR < nvec) s += sq(held.v[k]);
}
__device__ __forceinline__ void write_held(const Held& held, int head, int nvec, WritePass& out) {
    const int t = threadIdx.x % TPR;
    PRAGMA_UNROLL(REG_N)
    for (int k = 0; k < REG_N; ++k)
        if (t + k * TPR < nvec) out(head + PACK * (t + k * TPR), held.v[k]);
}
#endif

extern "C" __global__ void KERNEL_BOUNDS rmsnorm_template(const elem* RESTRICT x, const elem* RESTRICT weight,
                                                          elem* RESTRICT y, int rows, int cols, float eps) {
    const int r = blockIdx.x * RPB + threadIdx.x / TPR;
    if (r >= rows) return;  // whole rows only: a whole warp with WARP_ROW, never without
    const elem* xr = x + (size_t)r * cols;
    elem* yr = y + (size_t)r * cols;
    const Hints hints = make_hints();

    // head: columns before x's first PACK_ALIGN boundary; then nvec packs; then the tail.
    int head = 0, nvec = cols;
    bool wvec = true;
#if VEC4
    head = cols, nvec = 0, wvec = false;
    const size_t ax = (size_t)xr;
    if (((ax ^ (size_t)yr) & (PACK_ALIGN - 1)) == 0 && (ax & (ELEM_BYTES - 1)) == 0) {  // y rows aligned like x rows
        head = min(cols, (int)(((PACK_ALIGN - (ax & (PACK_ALIGN - 1))) & (PACK_ALIGN - 1)) / ELEM_BYTES));
        nvec = (cols - head) / PACK;
        wvec = ((ax ^ (size_t)weight) & (PACK_ALIGN - 1)) == 0;
    }
#endif
    Row row{xr, nullptr, (4 - (head & 3)) & 3, 0, hints};
#if SMEM_TILE
    extern __shared__ __align__(16) float cache_mem[];
    row.cap = min(CACHE_FLOATS / RPB, (cols + 3) / 4 * 4 + 4);
    row.cache = cache_mem + (threadIdx.x / TPR) * row.cap;
#endif

    __shared__ float red[RED_SIZE];
    WritePass out{yr, Norm{weight, 0.0f, wvec, hints}};
#if REG_ROW
    if (nvec <= REG_N * TPR) {  // the same for every thread of the row: barriers in row_reduce are safe
        // head and tail (under PACK elements each) are read twice, the body once, from registers
        const int t = threadIdx.x % TPR, tail = head + PACK * nvec;
        Held held;
        float s = 0.0f;
        hold(row, head, nvec, held, s);
        for (int c = t; c < head; c += TPR) s += sq(ld1<KEEP>(xr + c, hints));
        for (int c = tail + t; c < cols; c += TPR) s += sq(ld1<KEEP>(xr + c, hints));
        out.norm.rstd = RSQRT(row_reduce(s, SumOp(), 0.0f, red) / cols + eps);
        for (int c = t; c < head; c += TPR) out(c, ld1<LAST>(xr + c, hints));
        write_held(held, head, nvec, out);
        for (int c = tail + t; c < cols; c += TPR) out(c, ld1<LAST>(xr + c, hints));
        return;
    }
#endif
    SqPass first{0.0f};
    visit<KEEP>(row, head, nvec, cols, first);
    out.norm.rstd = RSQRT(row_reduce(first.s, SumOp(), 0.0f, red) / cols + eps);
    visit<LAST>(row, head, nvec, cols, out);
}

// ---- LEAN: rows of whole packs (cols a multiple of 8) in a kernel of its own, one block a row:
// each pass walks the row LEAN_N packs a thread at a time, all loaded before any is used, as
// torch.compile's Triton kernels for this op do (512 threads, the row in one or two steps). The
// general kernel's head, tail, shared-memory copy and held row are not in it, so they take no
// registers: Inductor's kernels fit in 32-40 registers, 3-4 blocks of 512 threads an SM, where the
// general kernel's chunked loop needs 54-56; this one fits the same, LEAN_THREADS threads an SM
// (at 2048, 32 registers). REG_ROW holds a row of one step in registers (LeanHeld); SMEM_TILE,
// UNROLL and CHUNK do not apply; the hints (EVICT_HINT, STORE_HINT), READONLY, WIDE and the
// reduction's switches do.
#define LEAN_B (LEAN_THREADS / BLOCK > 0 ? LEAN_THREADS / BLOCK : 1)  // blocks an SM
// packs a thread loads at once: UNROLL_BY, up to 16 values (8 at 2048 threads an SM, 32 registers:
// what they hold beside addresses, policies and a pack's weights without spilling)
#define LEAN_MOST (BLOCK * LEAN_B >= 2048 ? 8 : 16)
#define LEAN_N (UNROLL_BY * PACK <= LEAN_MOST ? UNROLL_BY : (LEAN_MOST / PACK > 0 ? LEAN_MOST / PACK : 1))

// One pass of the lean kernel over the row: f(c, pack) on its packs where `packed`, else f(c, v)
// on its elements.
template <int USE, class F>
__device__ __forceinline__ void lean_visit(const elem* xr, bool packed, int cols, const Hints& hints, F& f) {
    const int t = threadIdx.x;
    if (!packed) {
        for (int c = t; c < cols; c += BLOCK) f(c, ld1<USE>(xr + c, hints));
        return;
    }
    const int npk = cols / PACK;
    for (int i0 = t; i0 < npk; i0 += LEAN_N * BLOCK) {
        Pack v[LEAN_N];
        PRAGMA_UNROLL(LEAN_N)
        for (int k = 0; k < LEAN_N; ++k)
            if (i0 + k * BLOCK < npk) v[k] = ldp<USE>(xr + PACK * (i0 + k * BLOCK), hints);
        PRAGMA_UNROLL(LEAN_N)
        for (int k = 0; k < LEAN_N; ++k)
            if (i0 + k * BLOCK < npk) f(PACK * (i0 + k * BLOCK), v[k]);
    }
}

#if REG_ROW
// With REG_ROW, a row of at most LEAN_N packs a thread (one step of lean_visit) is read once, with
// the last-use hint, into registers, and every pass walks those, as torch.compile's persistent
// reductions do: x leaves DRAM once and is not read again, not even from the L2.
struct LeanHeld {
    Raw v[LEAN_N];  // bfloat16 packs as their bits, widened in each pass
    int npk;

    __device__ __forceinline__ LeanHeld(const elem* xr, int cols, const Hints& hints) : npk(cols / PACK) {
        const int t = threadIdx.x;
        PRAGMA_UNROLL(LEAN_N)
        for (int k = 0; k < LEAN_N; ++k)
            if (t + k * BLOCK < npk) v[k] = ldraw<LAST>(xr + PACK * (t + k * BLOCK), hints);
    }
    template <int USE, class F> __device__ __forceinline__ void pass(F& f) const {
        const int t = threadIdx.x;
        PRAGMA_UNROLL(LEAN_N)
        for (int k = 0; k < LEAN_N; ++k)
            if (t + k * BLOCK < npk) f(PACK * (t + k * BLOCK), widen(v[k]));
    }
};
__device__ __forceinline__ bool lean_holds(bool packed, int cols) { return packed && cols / PACK <= LEAN_N * BLOCK; }
#endif

extern "C" __global__ void __launch_bounds__(BLOCK, LEAN_B) rmsnorm_lean(const elem* RESTRICT x,
                                                                         const elem* RESTRICT weight, elem* RESTRICT y,
                                                                         int rows, int cols, float eps) {
#if LEAN && VEC4 && !WARP_ROW
    const elem* xr = x + (size_t)blockIdx.x * cols;
    elem* yr = y + (size_t)blockIdx.x * cols;
    const Hints hints = make_hints();
    __shared__ float red[RED_SIZE];
    // fsr's buffers start 16-byte aligned and a row is whole packs, so every row is aligned; a
    // buffer at another offset takes the element loops (the same for the whole block)
    const bool packed = (((size_t)xr | (size_t)yr | (size_t)weight) & (PACK_ALIGN - 1)) == 0;
#if REG_ROW
    if (lean_holds(packed, cols)) {  // the same for the whole block: row_reduce's barriers are safe
        const LeanHeld held(xr, cols, hints);
        SqPass first{0.0f};
        held.pass<KEEP>(first);
        WritePass out{yr, Norm{weight, RSQRT(row_reduce(first.s, SumOp(), 0.0f, red) / cols + eps), packed, hints}};
        held.pass<LAST>(out);
        return;
    }
#endif
    SqPass first{0.0f};
    lean_visit<KEEP>(xr, packed, cols, hints, first);
    WritePass out{yr, Norm{weight, RSQRT(row_reduce(first.s, SumOp(), 0.0f, red) / cols + eps), packed, hints}};
    lean_visit<LAST>(xr, packed, cols, hints, out);
#endif
}
