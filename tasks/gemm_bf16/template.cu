/* fsr
[tunables]
WM = [64, 32]          # rows of C per warp (m16 tiles of the MMA: a multiple of 16)
WN = [64, 32]          # columns of C per warp (pairs of n8 tiles: a multiple of 16)
WARPS_M = [2, 1, 4]    # warps along M: BM = WARPS_M * WM
WARPS_N = [4, 2, 1]    # warps along N, capped at 8 / WARPS_M (8 warps at most): BN = WARPS_N * WN
BK = [64, 32, 16]      # depth of a shared-memory k tile (k16 steps of the MMA)
STAGES = [3, 4, 2, 5, 6]  # k tiles in flight (cp.async pipeline), capped so that they fit 227 KiB
WG_BN = [256, 128]     # WGMMA: columns of C a block (and each wgmma, m64nWG_BNk16) covers
WG_MT = [1, 2]         # WGMMA: m64 row tiles a consumer warp group computes, capped at 256 // WG_BN (accumulator registers)
WG_CONSUMERS = [2, 1]  # WGMMA: consumer warp groups (besides the producer's): WG_BM = 64 * WG_MT * WG_CONSUMERS rows
WG_STAGES = [4, 3, 5, 6]  # WGMMA: k tiles (64 deep) in the TMA ring, capped so that they fit 227 KiB
WG_GROUP = [8, 16]     # WGMMA: block rows in a band of the raster order (L2 reuse of A and B)

[features]
SWIZZLE = [0, 1]        # XOR-swizzled 16-byte chunks in the shared tiles instead of rows padded by 16 bytes (less shared memory, conflict-free either way)
FRAG_PREFETCH = [0, 1]  # ldmatrix of k16 step s + 1 issued before the MMAs of step s (two fragment sets)
BLOCK_SWIZZLE = [0, 1]  # blocks walk C in bands of 8 block rows (column by column) for L2 reuse of A and B
FULL_TILES = [0, 1]     # blocks wholly inside C (K % BK == 0) copy their tiles without bounds checks
VEC4 = [0, 1]           # C tile staged in shared memory, then written in coalesced 16-byte vectors where N % 8 == 0 (with GELU, WGMMA stages it either way; VEC4 makes its stores 16 bytes)
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__ asking for 2 blocks an SM where the accumulators leave room (warp tiles up to 64 x 32)
#if GELU: FAST_MATH = [0, 1]      # GELU as x / (1 + __expf(-2u)) instead of 0.5 x (1 + tanhf(u))
WGMMA = [0, 1]          # Hopper's path where K % 8 == N % 8 == 0: TMA into 128-byte-swizzled stages on mbarriers, a producer warp group and wgmma consumer groups (setmaxnreg); the mma.sync kernel elsewhere

[[tensormap]]
name = "a_tiles"
buffer = "A"
dims = ["K", "M"]
box = ["64", "64 * min(WG_MT, 256 // WG_BN) * WG_CONSUMERS"]
swizzle = "128B"

[[tensormap]]
name = "b_tiles"
buffer = "B"
dims = ["N", "K"]
box = ["64", "64"]
swizzle = "128B"

[[launch]]
kernel = "gemm_bf16_template"
#if GELU: kernel = "gemm_bf16_gelu_template"
when = "WGMMA == 0 or K % 8 != 0 or N % 8 != 0"
grid = ["cdiv(N, WN * min(WARPS_N, 8 // WARPS_M))", "cdiv(M, WM * WARPS_M)"]
block = ["32 * WARPS_M * min(WARPS_N, 8 // WARPS_M)"]
smem = "max(min(STAGES, 232448 // (2 * (WARPS_M * WM * (BK + 8 - 8 * SWIZZLE) + BK * (WN * min(WARPS_N, 8 // WARPS_M) + 8 - 8 * SWIZZLE)))) * 2 * (WARPS_M * WM * (BK + 8 - 8 * SWIZZLE) + BK * (WN * min(WARPS_N, 8 // WARPS_M) + 8 - 8 * SWIZZLE)), VEC4 * 2 * WARPS_M * WM * (WN * min(WARPS_N, 8 // WARPS_M) + 8))"
args = ["A", "B", "C", "M", "N", "K"]
#if GELU: args = ["A", "B", "bias", "C", "M", "N", "K"]

[[launch]]
kernel = "gemm_bf16_wgmma"
#if GELU: kernel = "gemm_bf16_gelu_wgmma"
when = "WGMMA == 1 and K % 8 == 0 and N % 8 == 0"
grid = ["cdiv(N, WG_BN) * cdiv(M, 64 * min(WG_MT, 256 // WG_BN) * WG_CONSUMERS)"]
block = ["128 * (WG_CONSUMERS + 1)"]
smem = "2048 + min(WG_STAGES, 230400 // (128 * (64 * min(WG_MT, 256 // WG_BN) * WG_CONSUMERS + WG_BN))) * 128 * (64 * min(WG_MT, 256 // WG_BN) * WG_CONSUMERS + WG_BN)"
args = ["a_tiles", "b_tiles", "C", "M", "N", "K"]
#if GELU: args = ["a_tiles", "b_tiles", "bias", "C", "M", "N", "K"]
*/
// Feature template: C = A @ B in bfloat16 on the tensor cores, float32 accumulators, row-major; or
// with GELU 1 (a task's define: gemm_bf16_gelu) C = gelu(A @ B + bias), the bias and GELU (tanh
// form) applied to the float32 accumulators in the epilogue, before C's one rounding to bfloat16
// (that variant's kernels, gemm_bf16_gelu_template and gemm_bf16_gelu_wgmma, take the bias).
// A block computes a BM x BN tile of C with WARPS_M x WARPS_N warps, each a WM x WN sub-tile of
// m16n8k16 MMAs (mma.sync, bf16 operands, f32 accumulators). K is walked in BK-deep tiles, STAGES
// of them in flight in shared memory: cp.async copies tile t + STAGES - 1 while tile t is
// multiplied, fragments are read with ldmatrix (.trans for B, which is k-major in shared memory as
// in global). Every combination is correct for any M, N, K: cp.async takes 16-byte chunks (8
// elements), so it runs where K and N are multiples of 8 and A and B are 16-byte aligned, chunks
// past the edges zero-filled; otherwise the tiles are gathered element by element, zeros past
// the edges. Stores of C are guarded. WGMMA: Hopper's own path at the end of the file.
#include <cuda_bf16.h>

#ifndef GELU
#define GELU 0  // a variant's define (task.toml `template`), not a switch: it adds the bias argument
#endif

#define WARPS_NE (WARPS_N < 8 / WARPS_M ? WARPS_N : 8 / WARPS_M)  // the header's min(WARPS_N, 8 // WARPS_M)
#define NWARPS (WARPS_M * WARPS_NE)
#define NT (32 * NWARPS)  // threads per block
#define BM (WARPS_M * WM)
#define BN (WARPS_NE * WN)
#define MT (WM / 16)  // m16 tiles per warp
#define NT8 (WN / 8)  // n8 tiles per warp
#define KSTEPS (BK / 16)  // k16 steps per shared tile
#define CPA (BK / 8)  // 16-byte chunks in a row of the A tile
#define CPB (BN / 8)  // and of the B tile
#define CDIV(a, b) (((a) + (b) - 1) / (b))
static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "whole m16n8k16 tiles, n8 tiles in pairs");

#if SWIZZLE
#define PAD 0
#else
#define PAD 8  // 16 bytes a row: 8 rows read by one ldmatrix fall in 8 different bank groups
#endif
#define LDA (BK + PAD)  // elements between rows of an A tile in shared memory
#define LDB (BN + PAD)
#define A_STAGE (BM * LDA)  // elements
#define B_STAGE (BK * LDB)
#define STAGE_BYTES (2 * (A_STAGE + B_STAGE))
#define SMEM_MAX 232448  // 227 KiB, sm_90's largest opt-in
#define NSTAGES (STAGES * STAGE_BYTES <= SMEM_MAX ? STAGES : SMEM_MAX / STAGE_BYTES)  // as the header's smem
static_assert(NSTAGES >= 2, "two stages fit");

#if LAUNCH_BOUNDS
// Two blocks an SM halve the registers a thread may have: only where a warp's accumulators (WM x
// WN / 32 a thread) leave room for the fragments (up to 64 of 128 registers).
#define MIN_BLOCKS (WM * WN <= 2048 && NT <= 256 ? 2 : 1)
#define BOUNDS __launch_bounds__(NT, MIN_BLOCKS)
#else
#define BOUNDS
#endif

typedef float Acc[MT][NT8][4];  // MMA (mi, ni)'s accumulators: rows g, g, g + 8, g + 8 of its tile

// Element offset of 16-byte chunk c of row r in a tile whose rows hold CPR chunks. Padded rows, or
// with SWIZZLE the chunk index XORed with bits of the row chosen so that the 8 rows one ldmatrix
// reads (at one chunk) and the chunks one warp's cp.async writes land in distinct bank groups:
// rows shorter than 128 bytes share a 128-byte line, so the row's line within 8 decides.
template <int CPR, int LD>
__device__ __forceinline__ int chunk_at(int r, int c) {
#if SWIZZLE
    constexpr int ROWS_PER_LINE = CPR >= 8 ? 1 : 8 / CPR;
    constexpr int MASK = (CPR >= 8 ? 8 : CPR) - 1;
    return r * CPR * 8 + ((c ^ (r / ROWS_PER_LINE & MASK)) << 3);
#else
    return r * LD + c * 8;
#endif
}
#define A_AT(r, c) chunk_at<CPA, LDA>(r, c)
#define B_AT(r, c) chunk_at<CPB, LDB>(r, c)

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// ---- global -> shared --------------------------------------------------------------------------
// 16 bytes from src to shared dst, or 16 zero bytes where !ok (src is then not read).
__device__ __forceinline__ void copy16(unsigned dst, const void* src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void copy_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

struct Operands {
    const __nv_bfloat16* A;
    const __nv_bfloat16* B;
    int M, N, K, m0, n0;
    bool vec;  // K % 8 == 0, N % 8 == 0, A and B 16-byte aligned: cp.async copies whole chunks
};

// Elements [k, k + 8) of row `row` of a matrix with `cols` columns (`rows` rows), zeros outside,
// packed in pairs as the 16 bytes of a shared chunk; four 4-byte stores into dst.
__device__ __forceinline__ void gather8(unsigned* dst, const __nv_bfloat16* base, int row, int k, int rows, int cols) {
    const unsigned short* p = reinterpret_cast<const unsigned short*>(base) + (size_t)row * cols;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int c = k + 2 * j;
        const unsigned lo = row < rows && c < cols ? p[c] : 0u;
        const unsigned hi = row < rows && c + 1 < cols ? p[c + 1] : 0u;
        dst[j] = lo | hi << 16;
    }
}

// One operand's tile (ROWS x CPR chunks, at row r0 and element column c0 of a matrix with `rows`
// rows and `cols` columns) into shared tile `dst`. A thread copies chunk column tid % CPR of rows
// tid / CPR + j * NT / CPR (NT is a multiple of CPR). vec: cp.async chunks (cols % 8 == 0,
// 16-byte aligned base), else gathered element by element, one chunk at a time (few registers:
// this path shares the k loop with the fast one); FULL: no bounds checks.
template <int ROWS, int CPR, int LD, bool FULL>
__device__ __forceinline__ void load_chunks(__nv_bfloat16* dst, const __nv_bfloat16* src, int r0, int c0, int rows,
                                            int cols, bool vec) {
    static_assert(NT % CPR == 0, "a thread keeps one chunk column");
    constexpr int RS = NT / CPR;  // rows between a thread's chunks
    const int r = threadIdx.x / CPR, c = threadIdx.x % CPR, col = c0 + 8 * c;
    if (FULL || vec) {
#pragma unroll
        for (int j = 0; j < CDIV(ROWS, RS); ++j) {
            const int rj = r + j * RS;
            if (ROWS % RS != 0 && rj >= ROWS) break;
            const bool ok = FULL || (r0 + rj < rows && col < cols);
            copy16(smem_u32(dst + chunk_at<CPR, LD>(rj, c)), ok ? src + ((size_t)(r0 + rj) * cols + col) : src, ok);
        }
    } else {
#pragma unroll 1
        for (int rj = r; rj < ROWS; rj += RS)
            gather8(reinterpret_cast<unsigned*>(dst + chunk_at<CPR, LD>(rj, c)), src, r0 + rj, col, rows, cols);
    }
}

// Tile kt of A (BM x BK at m0, kt * BK) and of B (BK x BN at kt * BK, n0) into stage buffers as, bs.
template <bool FULL>
__device__ __forceinline__ void load_tile(const Operands& g, int kt, __nv_bfloat16* as, __nv_bfloat16* bs) {
    load_chunks<BM, CPA, LDA, FULL>(as, g.A, g.m0, kt * BK, g.M, g.K, g.vec);
    load_chunks<BK, CPB, LDB, FULL>(bs, g.B, kt * BK, g.n0, g.K, g.N, g.vec);
}

// ---- shared -> tensor cores --------------------------------------------------------------------
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* lo, unsigned* hi, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(lo[0]), "=r"(lo[1]), "=r"(hi[0]), "=r"(hi[1])
                 : "r"(addr));
}
__device__ __forceinline__ void mma_bf16(float* c, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

struct Frags {
    unsigned a[MT][4];   // m16 x k16 tile mi: registers (rows g | g + 8) x (k 2t.. | 2t + 8..)
    unsigned b[NT8][2];  // k16 x n8 tile ni: registers k 2t.. and 2t + 8.., column g
};

// Fragments of k16 step s of a stage. ldmatrix lane l gives the address of row l % 16 and
// chunk l / 16 of a 16 x 16 block: for A its four 8 x 8 matrices are exactly the MMA's a0..a3,
// for B (rows k, transposed) the k halves of two n8 tiles.
__device__ __forceinline__ void load_frags(const __nv_bfloat16* as, const __nv_bfloat16* bs, int wm, int wn, int s,
                                           Frags& f) {
    const int lane = threadIdx.x % 32, r = lane % 16, h = lane / 16;
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) ldmatrix_x4(f.a[mi], smem_u32(as + A_AT(wm + 16 * mi + r, 2 * s + h)));
#pragma unroll
    for (int nj = 0; nj < NT8 / 2; ++nj)
        ldmatrix_x4_trans(f.b[2 * nj], f.b[2 * nj + 1], smem_u32(bs + B_AT(16 * s + r, (wn + 16 * nj) / 8 + h)));
}

__device__ __forceinline__ void mma_frags(const Frags& f, Acc& acc) {
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int ni = 0; ni < NT8; ++ni) mma_bf16(acc[mi][ni], f.a[mi], f.b[ni]);
}

// acc += the stage's A tile (rows wm..) times its B tile (columns wn..).
__device__ __forceinline__ void compute(const __nv_bfloat16* as, const __nv_bfloat16* bs, int wm, int wn, Acc& acc) {
#if FRAG_PREFETCH
    Frags f[2];
    load_frags(as, bs, wm, wn, 0, f[0]);
#pragma unroll
    for (int s = 0; s < KSTEPS; ++s) {
        if (s + 1 < KSTEPS) load_frags(as, bs, wm, wn, s + 1, f[(s + 1) % 2]);
        mma_frags(f[s % 2], acc);
    }
#else
#pragma unroll
    for (int s = 0; s < KSTEPS; ++s) {
        Frags f;
        load_frags(as, bs, wm, wn, s, f);
        mma_frags(f, acc);
    }
#endif
}

// The k loop. One barrier a tile: at iteration t, tile t has landed (all but the newest
// NSTAGES - 2 copy groups are done) and every warp has finished tile t - 1, whose stage is then
// refilled with tile t + NSTAGES - 1 while tile t is multiplied. One group is committed per
// iteration, empty or not, so the count stays right; the gathered path stores synchronously and
// rides on the same barriers.
template <bool FULL>
__device__ __forceinline__ void gemm_k(const Operands& g, __nv_bfloat16* smem, int wm, int wn, Acc& acc) {
    const int ntiles = CDIV(g.K, BK);
#pragma unroll
    for (int s = 0; s < NSTAGES - 1; ++s) {
        if (s < ntiles) load_tile<FULL>(g, s, smem + s * A_STAGE, smem + NSTAGES * A_STAGE + s * B_STAGE);
        copy_commit();
    }
    for (int t = 0; t < ntiles; ++t) {
        copy_wait<NSTAGES - 2>();
        __syncthreads();
        const int next = t + NSTAGES - 1, sn = next % NSTAGES, sc = t % NSTAGES;
        if (next < ntiles) load_tile<FULL>(g, next, smem + sn * A_STAGE, smem + NSTAGES * A_STAGE + sn * B_STAGE);
        copy_commit();
        compute(smem + sc * A_STAGE, smem + NSTAGES * A_STAGE + sc * B_STAGE, wm, wn, acc);
    }
}

// ---- C -----------------------------------------------------------------------------------------
#if GELU
// GELU, tanh form: 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2 / pi) (x + 0.044715 x^3).
__device__ __forceinline__ float gelu(float x) {
    const float u = 0.7978845608f * (x + 0.044715f * x * x * x);
#if FAST_MATH
    return x / (1.0f + __expf(-2.0f * u));  // exp overflows to inf for very negative x: x / inf = -0
#else
    return 0.5f * x * (1.0f + tanhf(u));
#endif
}

// bias[n] as a float, 0 past N (such columns are never stored).
__device__ __forceinline__ float bias_at(const __nv_bfloat16* bias, int n, int N) {
    return n < N ? __bfloat162float(bias[n]) : 0.0f;
}

// What is stored for accumulator v whose column's bias is b.
__device__ __forceinline__ __nv_bfloat16 epilogue(float v, float b) { return __float2bfloat16_rn(gelu(v + b)); }
#else
// No bias (the kernels' `bias` is null): 0, read from nowhere, and v rounded to bfloat16 is stored.
__device__ __forceinline__ float bias_at(const __nv_bfloat16*, int, int) { return 0.0f; }
__device__ __forceinline__ __nv_bfloat16 epilogue(float v, float) { return __float2bfloat16_rn(v); }
#endif

#if VEC4
// The block's tile through shared memory (rows padded by 16 bytes: the fragment writes of a warp
// fall in distinct banks), then each thread writes whole 16-byte chunks of rows of C.
__device__ __forceinline__ void store(__nv_bfloat16* C, const __nv_bfloat16* bias, int M, int N, int m0, int n0, int wm,
                                     int wn, const Acc& acc, __nv_bfloat16* cs) {
    constexpr int LDC = BN + 8;
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    copy_wait<0>();
    __syncthreads();  // every warp is done with the pipeline's stages
#pragma unroll
    for (int ni = 0; ni < NT8; ++ni) {
        const int c = wn + 8 * ni + 2 * t;
        const float b0 = bias_at(bias, n0 + c, N), b1 = bias_at(bias, n0 + c + 1, N);
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = wm + 16 * mi + 8 * h + g;
                __nv_bfloat162 v;
                v.x = epilogue(acc[mi][ni][2 * h], b0);
                v.y = epilogue(acc[mi][ni][2 * h + 1], b1);
                *reinterpret_cast<__nv_bfloat162*>(cs + r * LDC + c) = v;
            }
    }
    __syncthreads();
    const bool vec = N % 8 == 0 && ((size_t)C & 15) == 0;
    for (int i = threadIdx.x; i < BM * CPB; i += NT) {
        const int r = i / CPB, c = 8 * (i % CPB), m = m0 + r, n = n0 + c;
        if (m >= M || n >= N) continue;
        __nv_bfloat16* dst = C + (size_t)m * N + n;
        if (vec) {
            *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(cs + r * LDC + c);
        } else {
            for (int j = 0; j < 8 && n + j < N; ++j) dst[j] = cs[r * LDC + c + j];
        }
    }
}
#else
// MMA accumulator registers 0, 1 (2, 3) are row g (g + 8), columns 2t and 2t + 1 of their tile:
// pairs of bfloat16 are stored as one 4-byte word where N is even and C 4-byte aligned.
__device__ __forceinline__ void store(__nv_bfloat16* C, const __nv_bfloat16* bias, int M, int N, int m0, int n0, int wm,
                                     int wn, const Acc& acc, __nv_bfloat16*) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const bool pairs = N % 2 == 0 && ((size_t)C & 3) == 0;
    float bv[NT8][2];  // the bias of this thread's columns, read once
#pragma unroll
    for (int ni = 0; ni < NT8; ++ni)
#pragma unroll
        for (int j = 0; j < 2; ++j) bv[ni][j] = bias_at(bias, n0 + wn + 8 * ni + 2 * t + j, N);
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = m0 + wm + 16 * mi + 8 * h + g;
            if (m >= M) continue;
            __nv_bfloat16* crow = C + (size_t)m * N;
#pragma unroll
            for (int ni = 0; ni < NT8; ++ni) {
                const int n = n0 + wn + 8 * ni + 2 * t;
                const __nv_bfloat16 x = epilogue(acc[mi][ni][2 * h], bv[ni][0]);
                const __nv_bfloat16 y = epilogue(acc[mi][ni][2 * h + 1], bv[ni][1]);
                if (pairs) {
                    if (n < N) *reinterpret_cast<__nv_bfloat162*>(crow + n) = __halves2bfloat162(x, y);
                } else {
                    if (n < N) crow[n] = x;
                    if (n + 1 < N) crow[n + 1] = y;
                }
            }
        }
}
#endif

#if GELU
extern "C" __global__ void BOUNDS gemm_bf16_gelu_template(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                                          const __nv_bfloat16* bias, __nv_bfloat16* C, int M, int N,
                                                          int K)
#else
extern "C" __global__ void BOUNDS gemm_bf16_template(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                                     __nv_bfloat16* C, int M, int N, int K)
#endif
{
#if !GELU
    const __nv_bfloat16* bias = nullptr;
#endif
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __nv_bfloat16* smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);
#if BLOCK_SWIZZLE
    // Block i of the launch (row-major over the grid) takes the band of 8 block rows it falls in,
    // column by column: a bijection for any grid, the last band possibly narrower.
    const int bid = blockIdx.y * gridDim.x + blockIdx.x, band = bid / (8 * gridDim.x);
    const int rows = min(8, (int)gridDim.y - 8 * band), in_band = bid - band * 8 * gridDim.x;
    const int m0 = (8 * band + in_band % rows) * BM, n0 = in_band / rows * BN;
#else
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
#endif
    const int warp = threadIdx.x / 32, wm = warp / WARPS_NE * WM, wn = warp % WARPS_NE * WN;
    Acc acc;
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int ni = 0; ni < NT8; ++ni)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[mi][ni][r] = 0.0f;

    const bool vec = K % 8 == 0 && N % 8 == 0 && (((size_t)A | (size_t)B) & 15) == 0;
    const Operands g{A, B, M, N, K, m0, n0, vec};
#if FULL_TILES
    if (vec && m0 + BM <= M && n0 + BN <= N && K % BK == 0) gemm_k<true>(g, smem, wm, wn, acc);
    else
#endif
        gemm_k<false>(g, smem, wm, wn, acc);
    store(C, bias, M, N, m0, n0, wm, wn, acc, smem);
}

// ---- Hopper: wgmma fed by the tensor memory accelerator (WGMMA) --------------------------------
// Where K and N are multiples of 8 (rows 16-byte aligned, as a tensor map needs), the header runs
// gemm_*_wgmma instead. A block of 128 (WG_CONSUMERS + 1) threads computes a WG_BM x WG_BN tile
// of C: warp group 0 is the producer, one thread of which copies the k tiles of A (WG_BM x 64) and
// B (64 x WG_BN, as WG_BN / 64 boxes of 64 x 64) into a ring of WG_STAGES stages by TMA, 128-byte
// swizzled, each stage completing on its `full` mbarrier; each consumer warp group multiplies its
// WG_MTE m64 row tiles of every stage with wgmma.mma_async m64nWG_BNk16 (both operands read from
// shared memory through descriptors; B k-by-n, "MN-major", so transposed), keeps one group of
// them in flight, and frees the stage before it on its `empty` mbarrier. Boxes past the edges of
// A and B are filled with zeros by the copy engine (and still count their whole bytes); stores of
// C are guarded. The producer gives registers back (setmaxnreg) to the consumers, whose
// accumulators are WG_MTE x WG_BN / 2 floats a thread.
#define WG_MTE (WG_MT < 256 / WG_BN ? WG_MT : 256 / WG_BN)  // m64 tiles a consumer: the header's min(WG_MT, 256 // WG_BN)
#define WG_BM (64 * WG_MTE * WG_CONSUMERS)
#define WG_THREADS (128 * (WG_CONSUMERS + 1))
#define WG_A_BYTES (WG_BM * 128)  // a stage's A tile: WG_BM rows of 64 k, 128 bytes each
#define WG_B_BYTES (WG_BN * 128)  // its B tile: WG_BN / 64 boxes of 64 k rows of 64 n
#define WG_STAGE_BYTES (WG_A_BYTES + WG_B_BYTES)
#define WG_NSTAGES (WG_STAGES < 230400 / WG_STAGE_BYTES ? WG_STAGES : 230400 / WG_STAGE_BYTES)  // as the header's smem
// Descriptor strides of B (bytes): LBO from one 64-column box to the next along n, SBO from one
// group of 8 k rows to the next (CUTLASS's canonical MN-major SW128 layout).
#define WG_B_LBO (64 * 128)
#define WG_B_SBO 1024

#if WGMMA && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
// fsr compiles for the arch-specific variant (sm_90a) where the plain arch's compile says an
// instruction is not supported on its target: said here, by the preprocessor, it spares a whole
// plain compile that ptxas would refuse at its end.
#error "wgmma and setmaxnreg are not supported on .target 'sm_90': WGMMA needs sm_90a"
#endif
#if WGMMA
static_assert(WG_BN == 128 || WG_BN == 256, "wgmma n128 or n256");
static_assert(WG_NSTAGES >= 2, "two stages fit");

__device__ __forceinline__ void bar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void bar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bar_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// One box of `map` at (x, y), innermost first, into shared dst; completes bytes on bar.
__device__ __forceinline__ void tma_load(unsigned dst, const CUtensorMap* map, int x, int y, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(bar) : "memory");
}

// A shared-memory matrix descriptor: start address, leading and stride byte offsets (16-byte
// units), 128-byte swizzle (mode 1 in bits 62-63).
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (unsigned long long)(lbo >> 4) << 16 |
           (unsigned long long)(sbo >> 4) << 32 | 1ull << 62;
}

#define WG_F8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
    "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_F64(i) WG_F8(i), WG_F8(i + 8), WG_F8(i + 16), WG_F8(i + 24), WG_F8(i + 32), WG_F8(i + 40), WG_F8(i + 48), \
    WG_F8(i + 56)
#define WG_R64 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "     \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "       \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "       \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_R128 WG_R64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "        \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// d (64 x WG_BN, the accumulator layout of mma.sync repeated along n) += A (64 x 16, K-major)
// times B (16 x WG_BN, MN-major: transposed, the last immediate).
__device__ __forceinline__ void wgmma(float* d, unsigned long long a, unsigned long long b) {
#if WG_BN == 256
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" WG_R128 "}, %128, %129, p, 1, 1, 0, 1;\n}"
                 : WG_F64(0), WG_F64(64) : "l"(a), "l"(b), "n"(1));
#else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_R64 "}, %64, %65, p, 1, 1, 0, 1;\n}"
                 : WG_F64(0) : "l"(a), "l"(b), "n"(1));
#endif
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait(float (&acc)[WG_MTE][WG_BN / 2]) {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
    // the accumulators are read (or multiplied into again) only after the wait
#pragma unroll
    for (int m = 0; m < WG_MTE; ++m)
#pragma unroll
        for (int i = 0; i < WG_BN / 2; ++i) asm volatile("" : "+f"(acc[m][i])::"memory");
}

// Which tile of C block `bid` computes: bands of WG_GROUP block rows walked column by column, so
// that the blocks running at once share rows of A and columns of B in L2 (a bijection for any
// grid; the last band may be narrower).
__device__ __forceinline__ void wg_tile(int M, int N, int& m0, int& n0) {
    const int tiles_n = CDIV(N, WG_BN), tiles_m = CDIV(M, WG_BM), bid = blockIdx.x;
    const int band = bid / (WG_GROUP * tiles_n), rows = min(WG_GROUP, tiles_m - WG_GROUP * band);
    const int in_band = bid - band * WG_GROUP * tiles_n;
    m0 = (WG_GROUP * band + in_band % rows) * WG_BM;
    n0 = in_band / rows * WG_BN;
}

// The producer's one thread: k tile kt into stage kt % WG_NSTAGES once the consumers freed it.
__device__ __forceinline__ void wg_produce(const CUtensorMap* a_tiles, const CUtensorMap* b_tiles, unsigned base,
                                           unsigned bars, int m0, int n0, int ntiles) {
    for (int kt = 0, s = 0, round = 0; kt < ntiles; ++kt) {
        bar_wait(bars + 8 * (WG_NSTAGES + s), (round & 1) ^ 1);  // a fresh barrier passes parity 1 at once
        const unsigned full = bars + 8 * s, a = base + s * WG_STAGE_BYTES, b = a + WG_A_BYTES;
        bar_expect(full, WG_STAGE_BYTES);
        tma_load(a, a_tiles, 64 * kt, m0, full);  // (k, m)
#pragma unroll
        for (int j = 0; j < WG_BN / 64; ++j) tma_load(b + j * 64 * 128, b_tiles, n0 + 64 * j, 64 * kt, full);  // (n, k)
        if (++s == WG_NSTAGES) s = 0, ++round;
    }
}

// A consumer warp group (c): its rows of every k tile into acc, one wgmma group in flight.
__device__ __forceinline__ void wg_consume(float (&acc)[WG_MTE][WG_BN / 2], unsigned base, unsigned bars, int c,
                                           int ntiles) {
    const bool lead = threadIdx.x % 128 == 0;
    for (int kt = 0, s = 0, round = 0, prev = 0; kt < ntiles; ++kt) {
        bar_wait(bars + 8 * s, round & 1);
        const unsigned a = base + s * WG_STAGE_BYTES + c * WG_MTE * 64 * 128, b = base + s * WG_STAGE_BYTES + WG_A_BYTES;
        wg_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k)  // k16 steps: 32 bytes along a swizzled A row, 16 rows of B
#pragma unroll
            for (int m = 0; m < WG_MTE; ++m)
                wgmma(acc[m], wg_desc(a + m * 64 * 128 + 32 * k, 16, 1024), wg_desc(b + 2048 * k, WG_B_LBO, WG_B_SBO));
        wg_commit();
        wg_wait<1>(acc);  // tile kt - 1's products are done: its stage is free
        if (kt > 0 && lead) bar_arrive(bars + 8 * (WG_NSTAGES + prev));
        prev = s;
        if (++s == WG_NSTAGES) s = 0, ++round;
    }
    wg_wait<0>(acc);
}
#endif

#if WGMMA && GELU
// Consumer c's accumulators into C through shared memory, so that GELU's code appears once and
// not once a register: every consumer's products done (all copies have landed and been
// multiplied), the stage ring holds the block's tile in float32, rows padded by 8 floats (a warp's
// writes of a register pair, 8 rows of 32 bytes, fill two wavefronts); then each consumer's threads
// take 8-column chunks of its rows, add the bias, take GELU and store the chunk, with VEC4 as one
// 16-byte store, else in 4-byte pairs (N is a multiple of 8 on this path, so a chunk is wholly
// inside C or outside). Register 4j + 2h + e of
// m64 tile m holds row 16 warp + lane / 4 + 8h, column 8j + 2 (lane % 4) + e of its tile.
#define WG_LDS (WG_BN + 8)  // floats between rows of the staged tile
static_assert(WG_BM * WG_LDS * 4 <= WG_NSTAGES * WG_STAGE_BYTES, "the staged tile fits the stage ring");
__device__ __forceinline__ void wg_store(const float (&acc)[WG_MTE][WG_BN / 2], __nv_bfloat16* C,
                                         const __nv_bfloat16* bias, int M, int N, int m0, int n0, int c,
                                         float* staged) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
    asm volatile("bar.sync 1, %0;" ::"n"(WG_CONSUMERS * 128) : "memory");  // no wgmma reads the ring now
#pragma unroll
    for (int m = 0; m < WG_MTE; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float* srow = staged + (64 * (c * WG_MTE + m) + 16 * warp + lane / 4 + 8 * h) * WG_LDS + 2 * (lane % 4);
#pragma unroll
            for (int j = 0; j < WG_BN / 8; ++j) {
                srow[8 * j] = acc[m][4 * j + 2 * h];
                srow[8 * j + 1] = acc[m][4 * j + 2 * h + 1];
            }
        }
    asm volatile("bar.sync 1, %0;" ::"n"(WG_CONSUMERS * 128) : "memory");  // every row is staged
    constexpr int CHUNKS = WG_BN / 8;  // 8-column chunks in a row
    const bool vec = ((size_t)C & 15) == 0, pairs = ((size_t)C & 3) == 0;
#pragma unroll 1
    for (int i = threadIdx.x % 128; i < 64 * WG_MTE * CHUNKS; i += 128) {
        const int r = 64 * c * WG_MTE + i / CHUNKS, col = 8 * (i % CHUNKS), row = m0 + r, n = n0 + col;
        if (row >= M || n >= N) continue;
        const float* src = staged + r * WG_LDS + col;
        __align__(16) __nv_bfloat16 out[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] = epilogue(src[e], bias_at(bias, n + e, N));
        __nv_bfloat16* dst = C + (size_t)row * N + n;
#if VEC4
        if (vec) {  // the chunk as one 16-byte store
            *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(out);
            continue;
        }
#endif
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
            if (pairs) {
                *reinterpret_cast<__nv_bfloat162*>(dst + e) = __halves2bfloat162(out[e], out[e + 1]);
            } else {
                dst[e] = out[e];
                dst[e + 1] = out[e + 1];
            }
        }
    }
}
#elif WGMMA
// Consumer c's accumulators into C: register 4j + 2h + e of m64 tile m holds row 16 warp + lane / 4
// + 8h, column 8j + 2 (lane % 4) + e of its tile; pairs of columns stored as one 4-byte word (N is a
// multiple of 8 on this path, so a pair is whole where its first column is inside C).
__device__ __forceinline__ void wg_store(const float (&acc)[WG_MTE][WG_BN / 2], __nv_bfloat16* C,
                                         const __nv_bfloat16*, int M, int N, int m0, int n0, int c, float*) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
    const bool pairs = ((size_t)C & 3) == 0;
#pragma unroll
    for (int m = 0; m < WG_MTE; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + 64 * (c * WG_MTE + m) + 16 * warp + lane / 4 + 8 * h;
            if (row >= M) continue;
            __nv_bfloat16* crow = C + (size_t)row * N;
#pragma unroll
            for (int j = 0; j < WG_BN / 8; ++j) {
                const int col = n0 + 8 * j + 2 * (lane % 4);
                if (col >= N) continue;
                const __nv_bfloat16 x = epilogue(acc[m][4 * j + 2 * h], 0.0f), y = epilogue(acc[m][4 * j + 2 * h + 1], 0.0f);
                if (pairs) {
                    *reinterpret_cast<__nv_bfloat162*>(crow + col) = __halves2bfloat162(x, y);
                } else {
                    crow[col] = x;
                    crow[col + 1] = y;
                }
            }
        }
}
#endif
#if WGMMA
#if WG_CONSUMERS > 1
// setmaxnreg needs a register cap at entry: 65536 / 384 threads, to a multiple of 8 (a cap, not
// the LAUNCH_BOUNDS switch's block-size promise, which is the mma.sync kernel's)
#define WG_BOUNDS __maxnreg__(168)
#else
#define WG_BOUNDS
#endif
#else
#define WG_BOUNDS
#endif

#if GELU
extern "C" __global__ void WG_BOUNDS gemm_bf16_gelu_wgmma(const __grid_constant__ CUtensorMap a_tiles,
                                                         const __grid_constant__ CUtensorMap b_tiles,
                                                         const __nv_bfloat16* bias, __nv_bfloat16* C, int M, int N,
                                                         int K)
#else
extern "C" __global__ void WG_BOUNDS gemm_bf16_wgmma(const __grid_constant__ CUtensorMap a_tiles,
                                                    const __grid_constant__ CUtensorMap b_tiles, __nv_bfloat16* C,
                                                    int M, int N, int K)
#endif
{
#if WGMMA
#if !GELU
    const __nv_bfloat16* bias = nullptr;
#endif
    extern __shared__ __align__(1024) unsigned char wg_smem[];
    // the 128-byte swizzle repeats every 1024 bytes: stages start on such a boundary (the header's
    // smem has 1024 bytes for this and 1024 for the barriers after the stages)
    const unsigned base = (smem_u32(wg_smem) + 1023) & ~1023u, bars = base + WG_NSTAGES * WG_STAGE_BYTES;
    if (threadIdx.x == 0) {
        for (int s = 0; s < WG_NSTAGES; ++s) {
            bar_init(bars + 8 * s, 1);                           // full: the producer's expect_tx
            bar_init(bars + 8 * (WG_NSTAGES + s), WG_CONSUMERS);  // empty: one arrival a consumer
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    int m0, n0;
    wg_tile(M, N, m0, n0);
    const int ntiles = CDIV(K, 64), group = threadIdx.x / 128;
    // Registers move within the block's pool, taken at launch (384 threads at the cap of 168):
    // 40 for the producer and 232 for each consumer make 64512 of those 64512.
    if (group == 0) {
#if WG_CONSUMERS > 1
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
#endif
        if (threadIdx.x == 0) wg_produce(&a_tiles, &b_tiles, base, bars, m0, n0, ntiles);
    } else {
#if WG_CONSUMERS > 1
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
#endif
        float acc[WG_MTE][WG_BN / 2];
#pragma unroll
        for (int m = 0; m < WG_MTE; ++m)
#pragma unroll
            for (int i = 0; i < WG_BN / 2; ++i) acc[m][i] = 0.0f;
        wg_consume(acc, base, bars, group - 1, ntiles);
        wg_store(acc, C, bias, M, N, m0, n0, group - 1, reinterpret_cast<float*>(wg_smem + (base - smem_u32(wg_smem))));
    }
#endif
}
