/* fsr
[tunables]
BLOCK = [256, 128, 512]      # threads per block (a power of two)
RW = [2, 4]                  # rows a group computes at once with REG_BLOCK
UNROLL_BY = [4, 2, 8]        # unroll factor of the column loops when UNROLL is on
XCHUNK = [2048, 1024, 4096]  # floats of x staged at a time with SMEM_TILE (a multiple of 4)

[features]
WARP_ROW = [0, 1]       # a warp per group of rows, BLOCK / 32 groups per block (else the block is one group)
WARP_SHUFFLE = [0, 1]   # reductions with __shfl_xor_sync (else a shared-memory tree)
VEC4 = [0, 1]           # float4 loads of A and x when N % 4 == 0 and both are 16-byte aligned (else floats)
SMEM_TILE = [0, 1]      # x staged in shared memory XCHUNK floats at a time, read by every group of the block
REG_BLOCK = [0, 1]      # a group computes RW rows at once: each x value loaded serves RW rows (else one)
READONLY = [0, 1]       # __restrict__ pointers and __ldg loads of A and x
UNROLL = [0, 1]         # unroll the column loops by UNROLL_BY (else not at all)
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__(BLOCK, 1): registers allotted for the block size
EVICT_HINT = [0, 1]     # L2 eviction priorities: A (read once) evict_first, x (read by every row) evict_last

[[launch]]
kernel = "gemv_template"
grid = ["cdiv(M, (1 + WARP_ROW * (BLOCK // 32 - 1)) * (1 + REG_BLOCK * (RW - 1)))"]
block = ["BLOCK"]
args = ["A", "x", "y", "M", "N"]
*/
// Feature template: y = A @ x in float32, A row-major. A group of threads (a warp with
// WARP_ROW, else the block) computes RG consecutive rows: its threads take columns round-robin
// and their partial sums are reduced at the end. Every combination of the switches above is a
// correct kernel for any M, N and alignment. Rows past M read row M - 1 and are not written.
//
// EVICT_HINT, on an H200 (4.8 TB/s of HBM3e, a 50 MB L2, 132 SMs): at the bench size A is 512 MiB
// streamed once through a 50 MB L2, and x (64 KiB) is read by every row. Loading A evict_first
// and x evict_last, as torch.compile's Triton kernel does, keeps A's lines from displacing x's in
// the L2 and the L1, so x's re-reads never go to DRAM and A's stream has the rest of the cache.
// The hints act within one launch only: fsr's timed runs start after an L2 flush, and
// certification sets the candidate's lines back to normal priority before its flush.

#if WARP_ROW
#define TPG 32  // threads per group
#define GROUP_SYNC() __syncwarp()
#else
#define TPG BLOCK
#define GROUP_SYNC() __syncthreads()
#endif
#define GPB (BLOCK / TPG)  // groups per block
#if REG_BLOCK
#define RG RW  // rows per group
#else
#define RG 1
#endif

#if LAUNCH_BOUNDS
#define BOUNDS __launch_bounds__(BLOCK, 1)
#else
#define BOUNDS
#endif

#if READONLY
#define RESTRICT __restrict__
#define LOAD(p) __ldg(p)
#else
#define RESTRICT
#define LOAD(p) (*(p))
#endif

// Loads of A (LDA, LDA4) and of x (LDX, LDX4): plain (LOAD), or with EVICT_HINT through
// .L2::cache_hint policies made once a thread (createpolicy, sm_80+), the L1 priority matching.
// Neither is volatile: nothing the kernel stores aliases A or x, so the compiler may schedule them.
#if EVICT_HINT
#if READONLY
#define LD_GLOBAL "ld.global.nc"
#else
#define LD_GLOBAL "ld.global"
#endif
__device__ __forceinline__ unsigned long long policy_stream() {
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ unsigned long long policy_keep() {
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ float ld_stream(const float* p) {
    float v;
    asm(LD_GLOBAL ".L1::evict_first.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(p), "l"(policy_stream()));
    return v;
}
__device__ __forceinline__ float ld_keep(const float* p) {
    float v;
    asm(LD_GLOBAL ".L1::evict_last.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(p), "l"(policy_keep()));
    return v;
}
#define LDA(p) ld_stream(p)
#define LDX(p) ld_keep(p)
#if VEC4
__device__ __forceinline__ float4 ld_stream4(const float* p) {
    float4 v;
    asm(LD_GLOBAL ".L1::evict_first.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(policy_stream()));
    return v;
}
__device__ __forceinline__ float4 ld_keep4(const float* p) {
    float4 v;
    asm(LD_GLOBAL ".L1::evict_last.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(policy_keep()));
    return v;
}
#define LDA4(p) ld_stream4(p)
#define LDX4(p) ld_keep4(p)
#endif
#else
#define LDA(p) LOAD(p)
#define LDX(p) LOAD(p)
#if VEC4
#define LDA4(p) LOAD(reinterpret_cast<const float4*>(p))
#define LDX4(p) LOAD(reinterpret_cast<const float4*>(p))
#endif
#endif

#define PRAGMA_TEXT(x) _Pragma(#x)
#define PRAGMA_UNROLL(n) PRAGMA_TEXT(unroll n)
#if UNROLL
#define LOOP_UNROLL PRAGMA_UNROLL(UNROLL_BY)
#else
#define LOOP_UNROLL _Pragma("unroll 1")
#endif

typedef float Acc[RG];          // a thread's partial sums, one per row of its group
typedef const float* Rows[RG];  // the group's rows of A

// Where x comes from: global memory, or the shared chunk that starts at column k0.
struct GlobalX {
    const float* x;
    __device__ __forceinline__ float at(int c) const { return LDX(x + c); }
#if VEC4
    __device__ __forceinline__ float4 at4(int c) const { return LDX4(x + c); }
#endif
};
struct SharedX {
    const float* xs;
    int k0;
    __device__ __forceinline__ float at(int c) const { return xs[c - k0]; }
#if VEC4
    __device__ __forceinline__ float4 at4(int c) const { return *reinterpret_cast<const float4*>(xs + c - k0); }
#endif
};

// acc[g] += sum over this thread's columns c in [lo, hi) of a[g][c] * x[c]. VEC: lo and hi are
// multiples of 4 and every row and x are 16-byte aligned.
template <bool VEC, class X>
__device__ __forceinline__ void accumulate(const Rows& a, const X& xv, int lo, int hi, Acc& acc) {
    const int t = threadIdx.x % TPG;
#if VEC4
    if constexpr (VEC) {
        LOOP_UNROLL
        for (int c = lo + 4 * t; c < hi; c += 4 * TPG) {
            const float4 xq = xv.at4(c);
            for (int g = 0; g < RG; ++g) {
                const float4 aq = LDA4(a[g] + c);
                acc[g] = fmaf(aq.x, xq.x, fmaf(aq.y, xq.y, fmaf(aq.z, xq.z, fmaf(aq.w, xq.w, acc[g]))));
            }
        }
        return;
    }
#endif
    LOOP_UNROLL
    for (int c = lo + t; c < hi; c += TPG) {
        const float xc = xv.at(c);
        for (int g = 0; g < RG; ++g) acc[g] = fmaf(LDA(a[g] + c), xc, acc[g]);
    }
}

template <class X>
__device__ __forceinline__ void accumulate_any(bool vec, const Rows& a, const X& xv, int lo, int hi, Acc& acc) {
#if VEC4
    if (vec) {
        accumulate<true>(a, xv, lo, hi, acc);
        return;
    }
#endif
    accumulate<false>(a, xv, lo, hi, acc);
}

// The group's sum of v, valid in its first thread.
__device__ __forceinline__ float group_sum(float v) {
#if WARP_SHUFFLE
    for (int mask = 16; mask > 0; mask >>= 1) v += __shfl_xor_sync(0xffffffffu, v, mask);
#if !WARP_ROW
    __shared__ float red[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < BLOCK / 32 ? red[lane] : 0.0f;
    for (int mask = 16; mask > 0; mask >>= 1) v += __shfl_xor_sync(0xffffffffu, v, mask);
    __syncthreads();  // red is reused by the next row
#endif
    return v;
#else
    __shared__ float red[BLOCK];
    const int t = threadIdx.x % TPG;
    float* r = red + (threadIdx.x - t);
    r[t] = v;
    GROUP_SYNC();
    for (int half = TPG / 2; half > 0; half >>= 1) {
        if (t < half) r[t] += r[t + half];
        GROUP_SYNC();
    }
    v = r[0];
    GROUP_SYNC();  // r[0] is overwritten by the next row
    return v;
#endif
}

extern "C" __global__ void BOUNDS gemv_template(const float* RESTRICT A, const float* RESTRICT x, float* RESTRICT y,
                                               int M, int N) {
    const int r0 = (blockIdx.x * GPB + threadIdx.x / TPG) * RG;  // the group's first row
    Rows a;
    Acc acc;
    for (int g = 0; g < RG; ++g) {
        a[g] = A + (size_t)min(r0 + g, M - 1) * N;
        acc[g] = 0.0f;
    }
    bool vec = false;
#if VEC4
    vec = N % 4 == 0 && (((size_t)A | (size_t)x) & 15) == 0;
#endif
#if SMEM_TILE
    __shared__ __align__(16) float xs[XCHUNK];
    for (int k0 = 0; k0 < N; k0 += XCHUNK) {  // the same bounds in every thread: barriers are safe
        const int k1 = min(N, k0 + XCHUNK);
        __syncthreads();  // the previous chunk has been read
        for (int c = k0 + (int)threadIdx.x; c < k1; c += BLOCK) xs[c - k0] = LDX(x + c);
        __syncthreads();
        accumulate_any(vec, a, SharedX{xs, k0}, k0, k1, acc);
    }
#else
    accumulate_any(vec, a, GlobalX{x}, 0, N, acc);
#endif
    for (int g = 0; g < RG; ++g) {
        const float v = group_sum(acc[g]);
        if (threadIdx.x % TPG == 0 && r0 + g < M) y[r0 + g] = v;
    }
}
