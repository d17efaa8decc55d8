/* fsr
[tunables]
TX = [16, 8]     # threads per block along N
TY = [16, 8]     # threads per block along M
TM = [8, 4]      # rows of C per thread with REG_BLOCK (a multiple of 4)
TN = [8, 4, 16]  # columns of C per thread with REG_BLOCK (a multiple of 4)
BK = [8, 16]     # depth of a shared-memory k tile with SMEM_TILE (a multiple of 4)

[features]
SMEM_TILE = [0, 1]      # stage BM x BK tiles of A and BK x BN tiles of B in shared memory (else read global)
REG_BLOCK = [0, 1]      # each thread computes TM x TN outputs in 4 x 4 chunks (else one)
VEC4 = [0, 1]           # float4 global loads and stores, float4 shared reads, where aligned
TRANSPOSE_A = [0, 1]    # A tile stored k-major (As[k][m]) so a thread's rows are contiguous
DOUBLE_BUFFER = [0, 1]  # two shared stages: tile t + 1 is fetched while tile t is computed
ASYNC_COPY = [0, 1]     # cp.async global-to-shared copies, zero-filled past the edges (not at BK = 8 with DOUBLE_BUFFER and FRAG_PREFETCH)
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__: 128 registers a thread (255 above 64 accumulators, TN = 16)
WARP_TILE = [0, 1]      # each warp owns a 2D sub-tile, lanes 4 x 8 (rows x columns): broadcast-friendly shared reads
FULL_TILES = [0, 1]     # with SMEM_TILE, blocks wholly inside C (K % BK == 0) run a k loop without bounds checks
FRAG_PREFETCH = [0, 1]  # with SMEM_TILE, shared fragments of step k + 1 read while step k's FMAs run (across the barrier with DOUBLE_BUFFER)
BLOCK_SWIZZLE = [0, 1]  # blocks walk C in bands of 16 block rows (column by column) for L2 reuse of A and B
TF32X3 = [0, 1]         # with SMEM_TILE and REG_BLOCK: float32-accurate products on the tensor cores (split TF32, three MMAs), a warp per 4 * TM x 8 * TN tile

[[launch]]
kernel = "sgemm_template"
grid = ["cdiv(N, TX * (1 + REG_BLOCK * (TN - 1)))", "cdiv(M, TY * (1 + REG_BLOCK * (TM - 1)))"]
block = ["TX", "TY"]
args = ["A", "B", "C", "M", "N", "K"]
*/
// Feature template: C = A @ B in float32, row-major. A block computes a BM x BN tile of C,
// BM = TY * TM and BN = TX * TN with REG_BLOCK (else TY x TX). Every combination of the switches
// above is a correct kernel for any M, N, K: float4 paths are taken only where K (for A), N (for
// B and C) and the base pointers allow them, and loads past the edges read zeros.

#if REG_BLOCK
#define RM TM
#define RN TN
#else
#define RM 1
#define RN 1
#endif
#define BM (TY * RM)  // rows of C per block
#define BN (TX * RN)  // columns of C per block
#define NT (TX * TY)  // threads per block
#define CDIV(a, b) (((a) + (b) - 1) / (b))
static_assert(RM == 1 || RM % 4 == 0, "TM must be a multiple of 4");
static_assert(RN == 1 || RN % 4 == 0, "TN must be a multiple of 4");
static_assert(BK % 4 == 0 && BN % 4 == 0, "tiles are whole float4s wide");

#if LAUNCH_BOUNDS
// 512 threads per SM (at most 128 registers a thread); 256 (at most 255) for more than 64
// accumulators a thread, which 128 registers cannot hold with their fragments
#define BOUNDS __launch_bounds__(NT, (RM * RN > 64 ? 256 : 512) / NT)
#else
#define BOUNDS
#endif

// TF32X3: the shared-memory tiles are multiplied by warps on the tensor cores. Each operand x
// is split into a high part h (x rounded to TF32's 10 mantissa bits) and a low part l (x - h,
// exact in float32, rounded to TF32 too); x * y is taken as l(x) h(y) + h(x) l(y) + h(x) h(y),
// three m16n8k8 TF32 MMAs summing in float32. What is dropped (l * l, l's rounding) is below
// 2^-20 of each product: the error stays that of float32 FMAs (tests/unit/tasks/test_tasks.py emulates
// it), unlike plain TF32, which the check rejects. Warps are laid out as WARP_TILE's: TY / 4 x
// TX / 8 of them, each a 4 * TM x 8 * TN tile of C, TM / 4 x TN MMA tiles of 16 x 8.
#define TC (TF32X3 && SMEM_TILE && REG_BLOCK)
#if TC
static_assert(BK % 8 == 0 && TX % 8 == 0 && TY % 4 == 0, "TF32X3: whole 16 x 8 x 8 MMA tiles per warp");
#define KSTEP 8  // k per MMA step
#define WM (4 * RM)  // rows of C per warp
#define WN (8 * RN)  // columns of C per warp
#else
#define KSTEP 1
#endif
#define KSTEPS (BK / KSTEP)  // fragment steps per shared k tile

// Register tiles of a thread (types keep the declarations short). With TF32X3 the accumulators
// of MMA tile (mi, j) are acc[4 * mi + c][j], c the MMA's accumulator register (0 to 3).
typedef float AccTile[RM][RN];
typedef float AFrag[RM];  // TF32X3: a[4 * mi + r], register r of m tile mi's A fragment
#if TC
typedef const float* BFrag;  // the step's B in shared memory: read one n tile at a time
#else
typedef float BFrag[RN];
#endif

// Row (column) of C, within the block's tile, of this thread's i-th row (j-th column). With
// REG_BLOCK they come in chunks of 4 consecutive rows (columns), so the float4 reads of a warp
// from a k-row of the tiles are contiguous.
#if WARP_TILE
// Warp w owns rows [wy * 4 * RM, (wy + 1) * 4 * RM) and columns [wx * 8 * RN, ...): wy = w / (TX /
// 8), wx = w % (TX / 8). Its lanes are 4 rows x 8 columns of threads, chunk q of a thread's rows
// (columns) at 16 * q (32 * q): a warp's float4 reads of a k-row touch 4 (8) consecutive
// float4s of A (B), each broadcast to 8 (4) lanes.
static_assert(TX % 8 == 0 && TY % 4 == 0, "WARP_TILE: whole 4 x 8 warps");
#define ROW_STEP 16  // rows between a thread's chunks of 4
#define COL_STEP 32
__device__ __forceinline__ int row0() {
    const int tid = threadIdx.y * TX + threadIdx.x, wy = tid / 32 / (TX / 8), ly = tid % 32 / 8;
    return RM == 1 ? wy * 4 + ly : wy * (4 * RM) + ly * 4;
}
__device__ __forceinline__ int col0() {
    const int tid = threadIdx.y * TX + threadIdx.x, wx = tid / 32 % (TX / 8), lx = tid % 8;
    return RN == 1 ? wx * 8 + lx : wx * (8 * RN) + lx * 4;
}
#else
// Chunk q at 4 * TY * q (4 * TX * q).
#define ROW_STEP (4 * TY)
#define COL_STEP (4 * TX)
__device__ __forceinline__ int row0() { return RM == 1 ? (int)threadIdx.y : (int)threadIdx.y * 4; }
__device__ __forceinline__ int col0() { return RN == 1 ? (int)threadIdx.x : (int)threadIdx.x * 4; }
#endif
// The i-th row (j-th column) of a thread: a compile-time offset from its first.
__host__ __device__ constexpr int row_off(int i) { return (i / 4) * ROW_STEP + i % 4; }
__host__ __device__ constexpr int col_off(int j) { return (j / 4) * COL_STEP + j % 4; }
__device__ __forceinline__ int tile_row(int i) { return row0() + row_off(i); }
__device__ __forceinline__ int tile_col(int j) { return col0() + col_off(j); }

// ---- without shared memory: every thread reads its rows of A and columns of B ---------------
#if !SMEM_TILE
typedef const float* ARows[RM];
typedef int BCols[RN];

__device__ __forceinline__ void gemm_direct(const float* A, const float* B, int M, int N, int K, int m0, int n0,
                                            AccTile& acc) {
    // Rows past M and columns past N read row M - 1 and column N - 1; their results are dropped.
    ARows arow;
    BCols bcol;
#pragma unroll
    for (int i = 0; i < RM; ++i) arow[i] = A + (size_t)min(m0 + tile_row(i), M - 1) * K;
#pragma unroll
    for (int j = 0; j < RN; ++j) bcol[j] = min(n0 + tile_col(j), N - 1);
#if VEC4
    if constexpr (RN >= 4) {
        if (N % 4 == 0 && ((size_t)B & 15) == 0) {
#pragma unroll
            for (int q = 0; q < RN / 4; ++q) bcol[4 * q] = min(n0 + tile_col(4 * q), N - 4);  // whole float4s
            for (int k = 0; k < K; ++k) {
                AFrag a;
                BFrag b;
                const float* brow = B + (size_t)k * N;
#pragma unroll
                for (int i = 0; i < RM; ++i) a[i] = arow[i][k];
#pragma unroll
                for (int q = 0; q < RN / 4; ++q) {
                    const float4 v = *reinterpret_cast<const float4*>(brow + bcol[4 * q]);
                    b[4 * q] = v.x;
                    b[4 * q + 1] = v.y;
                    b[4 * q + 2] = v.z;
                    b[4 * q + 3] = v.w;
                }
#pragma unroll
                for (int i = 0; i < RM; ++i)
#pragma unroll
                    for (int j = 0; j < RN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
            return;
        }
    }
#endif
    for (int k = 0; k < K; ++k) {
        AFrag a;
        BFrag b;
        const float* brow = B + (size_t)k * N;
#pragma unroll
        for (int i = 0; i < RM; ++i) a[i] = arow[i][k];
#pragma unroll
        for (int j = 0; j < RN; ++j) b[j] = brow[bcol[j]];
#pragma unroll
        for (int i = 0; i < RM; ++i)
#pragma unroll
            for (int j = 0; j < RN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}
#endif

// ---- shared-memory tiles -----------------------------------------------------------------------
#if SMEM_TILE
#define STAGES (1 + DOUBLE_BUFFER)
// At BK = 8 with DOUBLE_BUFFER and FRAG_PREFETCH, staging through registers beats cp.async (one
// float4 of A per thread, not four 4-byte copies): ASYNC_COPY keeps that path there.
// The cross-barrier fragment prefetch (prefetch_loop). Not with TF32X3, which reads B from the
// stage as it multiplies: those reads must not cross the barrier after which the stage is refilled.
#define CROSS_PREFETCH (DOUBLE_BUFFER && FRAG_PREFETCH && !TC)
#define USE_ASYNC (ASYNC_COPY && !(CROSS_PREFETCH && BK == 8))
// A pad of 4 floats spreads a warp's stores (reads) of A over the banks, where the stages still
// fit in 48 KiB (BK = 16 with a 128 x 256 tile and DOUBLE_BUFFER does not: no pad there).
// TF32X3's fragment reads (8 rows or columns x 4 k) are spread by a pad of 8 on k-major tiles.
#define FITS(a_floats, b_floats) (STAGES * ((a_floats) + (b_floats)) * 4 <= 48 * 1024)
#if TC
#define B_LD (BN + (FITS(BM * BK, BK * (BN + 8)) ? 8 : 0))
#define A_PAD_T 8
#else
#define B_LD BN
#define A_PAD_T 4
#endif
#if TRANSPOSE_A
#define A_LD (BM + (FITS(BK * (BM + A_PAD_T), BK * B_LD) ? A_PAD_T : 0))  // As[k][m]
#define A_AT(m, k) ((k) * A_LD + (m))
#define A_SIZE (BK * A_LD)
#else
#define A_LD (BK + (FITS(BM * (BK + 4), BK * B_LD) ? 4 : 0))  // As[m][k]; rows stay 16-byte aligned
#define A_AT(m, k) ((m) * A_LD + (k))
#define A_SIZE (BM * A_LD)
#endif
#define B_AT(k, n) ((k) * B_LD + (n))  // Bs[k][n]
#define B_SIZE (BK * B_LD)

// A tile load is split into units, elements or (VEC) float4s along the contiguous dimension (k
// for A, n for B), dealt to the threads round-robin; *_PER is a thread's share. The float4 and
// the scalar versions of the main loop are separate instantiations, so each holds only its own
// addresses in registers.
template <bool VEC> struct Units {
    static constexpr int W = VEC ? 4 : 1;  // floats per unit
    static constexpr int A_UNITS = BM * BK / W, B_UNITS = BK * BN / W;
    static constexpr int A_PER = CDIV(A_UNITS, NT), B_PER = CDIV(B_UNITS, NT);
    // unit u of the A (B) tile: its row and column within the tile
    // (unsigned: the divisions are shifts, and the compiler sees that units l = 0, 1, ... of a
    // thread share one column and step through rows by a constant)
    static __device__ __forceinline__ void a_at(unsigned u, int& m, int& k) { m = u / (BK / W); k = u % (BK / W) * W; }
    static __device__ __forceinline__ void b_at(unsigned u, int& k, int& n) { k = u / (BN / W); n = u % (BN / W) * W; }
};
// FULL_TILES: where a thread's units sit whole rows apart, unit l's source is the thread's first
// unit's plus l rows (a 64-bit step from a pointer hoisted out of the loop, no index arithmetic).
template <bool VEC> struct Steps {
    using U = Units<VEC>;
    static constexpr bool A_ROWS = NT % (BK / U::W) == 0, B_ROWS = NT % (BN / U::W) == 0;
    static constexpr int A_STEP = A_ROWS ? NT / (BK / U::W) : 0, B_STEP = B_ROWS ? NT / (BN / U::W) : 0;
    // this thread's first A (B) unit at k-tile k0
    static __device__ __forceinline__ const float* a0(const struct Operands& g, unsigned tid, int k0);
    static __device__ __forceinline__ const float* b0(const struct Operands& g, unsigned tid, int k0);
};
#define FOR_UNITS(l, u, PER, UNITS)              \
    _Pragma("unroll") for (int l = 0; l < PER; ++l) \
        if (const unsigned u = tid + l * NT; UNITS % NT == 0 || u < UNITS)

// The block's operands.
struct Operands {
    const float* A;
    const float* B;
    int M, N, K, m0, n0;
};
template <bool VEC> __device__ __forceinline__ const float* Steps<VEC>::a0(const Operands& g, unsigned tid, int k0) {
    int m, k;
    U::a_at(tid, m, k);
    return g.A + (size_t)(g.m0 + m) * g.K + k0 + k;
}
template <bool VEC> __device__ __forceinline__ const float* Steps<VEC>::b0(const Operands& g, unsigned tid, int k0) {
    int k, n;
    U::b_at(tid, k, n);
    return g.B + (size_t)(k0 + k) * g.N + g.n0 + n;
}

// Global memory -> registers, zeros past the edges (a float4 is wholly inside or outside, as
// K % 4 == 0 and N % 4 == 0 on the float4 path).
template <bool VEC, bool FULL>
__device__ __forceinline__ void fetch(const Operands& g, int k0, float* sa, float* sb) {
    using U = Units<VEC>;
    using S = Steps<VEC>;
    const unsigned tid = threadIdx.y * TX + threadIdx.x;
    const float* a0 = FULL && S::A_ROWS ? S::a0(g, tid, k0) : g.A;
    const float* b0 = FULL && S::B_ROWS ? S::b0(g, tid, k0) : g.B;
    FOR_UNITS(l, u, U::A_PER, U::A_UNITS) {
        int m, k;
        U::a_at(u, m, k);
        const bool ok = FULL || (g.m0 + m < g.M && k0 + k < g.K);
        const float* src = FULL && S::A_ROWS ? a0 + (size_t)(l * S::A_STEP) * g.K : g.A + ((g.m0 + m) * g.K + k0 + k);
#if VEC4
        if constexpr (VEC) {
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (ok) v = *reinterpret_cast<const float4*>(src);
            sa[4 * l] = v.x;
            sa[4 * l + 1] = v.y;
            sa[4 * l + 2] = v.z;
            sa[4 * l + 3] = v.w;
        } else
#endif
            sa[l] = ok ? *src : 0.0f;
    }
    FOR_UNITS(l, u, U::B_PER, U::B_UNITS) {
        int k, n;
        U::b_at(u, k, n);
        const bool ok = FULL || (k0 + k < g.K && g.n0 + n < g.N);
        const float* src = FULL && S::B_ROWS ? b0 + (size_t)(l * S::B_STEP) * g.N : g.B + ((k0 + k) * g.N + g.n0 + n);
#if VEC4
        if constexpr (VEC) {
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (ok) v = *reinterpret_cast<const float4*>(src);
            sb[4 * l] = v.x;
            sb[4 * l + 1] = v.y;
            sb[4 * l + 2] = v.z;
            sb[4 * l + 3] = v.w;
        } else
#endif
            sb[l] = ok ? *src : 0.0f;
    }
}

// Registers -> one shared stage, the same units as fetch.
template <bool VEC>
__device__ __forceinline__ void stash(const float* sa, const float* sb, float* as, float* bs) {
    using U = Units<VEC>;
    const unsigned tid = threadIdx.y * TX + threadIdx.x;
    FOR_UNITS(l, u, U::A_PER, U::A_UNITS) {
        int m, k;
        U::a_at(u, m, k);
#if VEC4 && !TRANSPOSE_A
        if constexpr (VEC) {
            *reinterpret_cast<float4*>(as + A_AT(m, k)) = make_float4(sa[4 * l], sa[4 * l + 1], sa[4 * l + 2], sa[4 * l + 3]);
            continue;
        }
#endif
#pragma unroll
        for (int q = 0; q < U::W; ++q) as[A_AT(m, k + q)] = sa[U::W * l + q];
    }
    FOR_UNITS(l, u, U::B_PER, U::B_UNITS) {
        int k, n;
        U::b_at(u, k, n);
#if VEC4
        if constexpr (VEC) {
            *reinterpret_cast<float4*>(bs + B_AT(k, n)) = make_float4(sb[4 * l], sb[4 * l + 1], sb[4 * l + 2], sb[4 * l + 3]);
            continue;
        }
#endif
        bs[B_AT(k, n)] = sb[l];
    }
}

#if ASYNC_COPY
// cp.async: the copy lands in shared memory without passing through registers; a source size
// of 0 writes zeros (the address is then A or B itself, never dereferenced past an edge).
__device__ __forceinline__ void copy4(float* dst, const float* src, bool valid) {
#if __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0) : "memory");
#else
    *dst = valid ? *src : 0.0f;
#endif
}
__device__ __forceinline__ void copy16(float* dst, const float* src, bool valid) {
#if __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
#else
#pragma unroll
    for (int q = 0; q < 4; ++q) dst[q] = valid ? src[q] : 0.0f;
#endif
}
__device__ __forceinline__ void copy_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int PENDING>
__device__ __forceinline__ void copy_wait() {  // until at most PENDING groups are in flight
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
#endif
}

// One tile of A and of B into a shared stage. A transposed A tile goes element by element.
template <bool VEC, bool FULL>
__device__ __forceinline__ void copy_tiles(const Operands& g, int k0, float* as, float* bs) {
    constexpr bool VA = VEC && !TRANSPOSE_A;
    using UA = Units<VA>;
    using UB = Units<VEC>;
    using SA = Steps<VA>;
    using SB = Steps<VEC>;
    const unsigned tid = threadIdx.y * TX + threadIdx.x;
    const float* a0 = FULL && SA::A_ROWS ? SA::a0(g, tid, k0) : g.A;
    const float* b0 = FULL && SB::B_ROWS ? SB::b0(g, tid, k0) : g.B;
    FOR_UNITS(l, u, UA::A_PER, UA::A_UNITS) {
        int m, k;
        UA::a_at(u, m, k);
        const bool ok = FULL || (g.m0 + m < g.M && k0 + k < g.K);
        const float* src = FULL && SA::A_ROWS ? a0 + (size_t)(l * SA::A_STEP) * g.K
                           : ok ? g.A + ((g.m0 + m) * g.K + k0 + k) : g.A;
        if constexpr (VA) copy16(as + A_AT(m, k), src, ok);
        else copy4(as + A_AT(m, k), src, ok);
    }
    FOR_UNITS(l, u, UB::B_PER, UB::B_UNITS) {
        int k, n;
        UB::b_at(u, k, n);
        const bool ok = FULL || (k0 + k < g.K && g.n0 + n < g.N);
        const float* src = FULL && SB::B_ROWS ? b0 + (size_t)(l * SB::B_STEP) * g.N
                           : ok ? g.B + ((k0 + k) * g.N + g.n0 + n) : g.B;
        if constexpr (VEC) copy16(bs + B_AT(k, n), src, ok);
        else copy4(bs + B_AT(k, n), src, ok);
    }
}
#endif

#if TC
// Lane (g, t) = (lane / 4, lane % 4) of warp (wy, wx) reads A at rows g, g + 8 and k t, t + 4 of
// each m tile, and B at k t, t + 4 and column g of each n tile (PTX's m16n8k8 TF32 layouts).
__device__ __forceinline__ void warp_at(int& wm, int& wn, int& g, int& t) {
    const int tid = threadIdx.y * TX + threadIdx.x, w = tid / 32;
    wm = w / (TX / 8) * WM;
    wn = w % (TX / 8) * WN;
    g = tid % 32 / 4;
    t = tid % 4;
}
// This thread's first fragment element in a stage, so every read is base + constant.
__device__ __forceinline__ int a_frag0() {
    int wm, wn, g, t;
    warp_at(wm, wn, g, t);
    return A_AT(wm + g, t);
}
__device__ __forceinline__ int b_frag0() {
    int wm, wn, g, t;
    warp_at(wm, wn, g, t);
    return B_AT(t, wn + g);
}

// The fragments of MMA step kk (k = 8 * kk to 8 * kk + 7) of one stage.
__device__ __forceinline__ void load_frags(const float* af, const float* bf, int kk, AFrag& a, BFrag& b) {
    const int k = 8 * kk;
#pragma unroll
    for (int mi = 0; mi < RM / 4; ++mi) {
        a[4 * mi] = af[A_AT(16 * mi, k)];
        a[4 * mi + 1] = af[A_AT(16 * mi + 8, k)];
        a[4 * mi + 2] = af[A_AT(16 * mi, k + 4)];
        a[4 * mi + 3] = af[A_AT(16 * mi + 8, k + 4)];
    }
    b = bf + B_AT(k, 0);
}

// x rounded to TF32 (10 mantissa bits, half away from zero), as the bits of a float32.
__device__ __forceinline__ unsigned tf32_round(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }

__device__ __forceinline__ void mma_tf32(float* c, const unsigned* a, const unsigned* b) {
#if defined(__CUDA_ARCH__)
    static_assert(__CUDA_ARCH__ >= 800, "TF32X3 needs sm_80 or later (mma.sync with TF32 operands)");
#endif
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// acc += the step's products: the small cross terms first, then the high parts, into a fresh
// sum that is then added to acc (rounded to nearest). MMAs accumulating into acc itself would
// truncate each sum to acc's precision, a bias that over 3 x K / 8 MMAs failed the check (K = 4096).
__device__ __forceinline__ void fma_frags(const AFrag& a, const BFrag& b, AccTile& acc) {
    unsigned ah[RM], al[RM];
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        ah[i] = tf32_round(a[i]);
        al[i] = tf32_round(a[i] - __uint_as_float(ah[i]));
    }
#pragma unroll
    for (int j = 0; j < RN; ++j) {  // B split one n tile at a time: fewer registers live
        unsigned bh[2], bl[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float x = b[B_AT(4 * r, 8 * j)];
            bh[r] = tf32_round(x);
            bl[r] = tf32_round(x - __uint_as_float(bh[r]));
        }
#pragma unroll
        for (int mi = 0; mi < RM / 4; ++mi) {
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_tf32(c, al + 4 * mi, bh);
            mma_tf32(c, ah + 4 * mi, bl);
            mma_tf32(c, ah + 4 * mi, bh);
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[4 * mi + r][j] += c[r];
        }
    }
}
#else
__device__ __forceinline__ int a_frag0() { return A_AT(row0(), 0); }
__device__ __forceinline__ int b_frag0() { return B_AT(0, col0()); }

// The fragments of k-step kk of one stage: this thread's rows of A and columns of B. af and bf
// point at the thread's first row (column) in the stage, so every read is base + constant.
__device__ __forceinline__ void load_frags(const float* af, const float* bf, int kk, AFrag& a, BFrag& b) {
#if TRANSPOSE_A && VEC4
    if constexpr (RM >= 4) {
#pragma unroll
        for (int q = 0; q < RM / 4; ++q) {
            const float4 v = *reinterpret_cast<const float4*>(af + A_AT(row_off(4 * q), kk));
            a[4 * q] = v.x;
            a[4 * q + 1] = v.y;
            a[4 * q + 2] = v.z;
            a[4 * q + 3] = v.w;
        }
    } else {
        a[0] = af[A_AT(0, kk)];
    }
#else
#pragma unroll
    for (int i = 0; i < RM; ++i) a[i] = af[A_AT(row_off(i), kk)];
#endif
#if VEC4
    if constexpr (RN >= 4) {
#pragma unroll
        for (int q = 0; q < RN / 4; ++q) {
            const float4 v = *reinterpret_cast<const float4*>(bf + B_AT(kk, col_off(4 * q)));
            b[4 * q] = v.x;
            b[4 * q + 1] = v.y;
            b[4 * q + 2] = v.z;
            b[4 * q + 3] = v.w;
        }
    } else {
        b[0] = bf[B_AT(kk, 0)];
    }
#else
#pragma unroll
    for (int j = 0; j < RN; ++j) b[j] = bf[B_AT(kk, col_off(j))];
#endif
}

__device__ __forceinline__ void fma_frags(const AFrag& a, const BFrag& b, AccTile& acc) {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
}
#endif

// acc += As * Bs over one stage; af and bf as for load_frags.
__device__ __forceinline__ void compute(const float* af, const float* bf, AccTile& acc) {
#if FRAG_PREFETCH
    // two fragment sets: the reads of step kk + 1 are issued before the FMAs of step kk
    AFrag a[2];
    BFrag b[2];
    load_frags(af, bf, 0, a[0], b[0]);
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
        if (kk + 1 < KSTEPS) load_frags(af, bf, kk + 1, a[(kk + 1) % 2], b[(kk + 1) % 2]);
        fma_frags(a[kk % 2], b[kk % 2], acc);
    }
#else
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
        AFrag a;
        BFrag b;
        load_frags(af, bf, kk, a, b);
        fma_frags(a, b, acc);
    }
#endif
}

// Cross-barrier fragment prefetch (DOUBLE_BUFFER with FRAG_PREFETCH): before the FMAs of tile t's
// last step, tile t + 1 is made to land in stage s ^ 1 (land()), the barrier passed and its first
// fragments read, so no step waits on shared reads. One barrier a tile suffices: stage s ^ 1 is
// refilled (issue(), at the start of tile t) only after the barrier that ended all reads of it.
template <class Issue, class Land>
__device__ __forceinline__ void prefetch_loop(int ntiles, const float* af, const float* bf, AccTile& acc, Issue issue,
                                              Land land) {
    constexpr int AS = A_SIZE, BS = B_SIZE;  // floats between the stages
    AFrag a[2];
    BFrag b[2];
    load_frags(af, bf, 0, a[0], b[0]);
    for (int t = 0; t < ntiles; ++t) {
        const int s = t % 2;
        const float* as = af + s * AS;
        const float* bs = bf + s * BS;
        issue(t + 1);
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
            if (kk + 1 < KSTEPS) {
                load_frags(as, bs, kk + 1, a[(kk + 1) % 2], b[(kk + 1) % 2]);
            } else {
                land(t + 1);
                __syncthreads();
                // BK is even: step 0 uses a[0]; past the last tile the read is of a stale stage, unused
                load_frags(af + (s ^ 1) * AS, bf + (s ^ 1) * BS, 0, a[0], b[0]);
            }
            fma_frags(a[kk % 2], b[kk % 2], acc);
        }
    }
}

// The k loop over shared tiles; VEC: K and N are multiples of 4, A and B 16-byte aligned; FULL:
// the block's tile lies wholly inside C and K % BK == 0, so no load needs a bounds check.
template <bool VEC, bool FULL>
__device__ __forceinline__ void gemm_tiled(const Operands& g, float (*As)[A_SIZE], float (*Bs)[B_SIZE], AccTile& acc) {
    const int ntiles = CDIV(g.K, BK);
    const float* af = As[0] + a_frag0();  // this thread's fragments in stage 0
    const float* bf = Bs[0] + b_frag0();
#if USE_ASYNC && CROSS_PREFETCH
    copy_tiles<VEC, FULL>(g, 0, As[0], Bs[0]);
    copy_commit();
    copy_wait<0>();
    __syncthreads();
    prefetch_loop(
        ntiles, af, bf, acc,
        [&](int t) {
            if (t < ntiles) copy_tiles<VEC, FULL>(g, t * BK, As[t % 2], Bs[t % 2]);
            copy_commit();
        },
        [](int) { copy_wait<0>(); });
#elif USE_ASYNC && DOUBLE_BUFFER
    copy_tiles<VEC, FULL>(g, 0, As[0], Bs[0]);
    copy_commit();
    for (int t = 0; t < ntiles; ++t) {
        if (t + 1 < ntiles) copy_tiles<VEC, FULL>(g, (t + 1) * BK, As[(t + 1) % 2], Bs[(t + 1) % 2]);
        copy_commit();  // possibly empty: one group per iteration keeps the count below right
        copy_wait<1>();  // everything but the newest group has landed: tile t is in
        __syncthreads();
        compute(af + t % 2 * A_SIZE, bf + t % 2 * B_SIZE, acc);
        __syncthreads();  // stage t % 2 is refilled by the next iteration
    }
#elif USE_ASYNC
    for (int t = 0; t < ntiles; ++t) {
        copy_tiles<VEC, FULL>(g, t * BK, As[0], Bs[0]);
        copy_commit();
        copy_wait<0>();
        __syncthreads();
        compute(af, bf, acc);
        __syncthreads();
    }
#else
    typedef float AStaged[Units<VEC>::A_PER * Units<VEC>::W];  // floats a thread has in flight
    typedef float BStaged[Units<VEC>::B_PER * Units<VEC>::W];
    AStaged sa;
    BStaged sb;
#if CROSS_PREFETCH
    fetch<VEC, FULL>(g, 0, sa, sb);
    stash<VEC>(sa, sb, As[0], Bs[0]);
    __syncthreads();
    prefetch_loop(
        ntiles, af, bf, acc,
        [&](int t) {
            if (t < ntiles) fetch<VEC, FULL>(g, t * BK, sa, sb);  // in flight while tile t - 1 is computed
        },
        [&](int t) {
            if (t < ntiles) stash<VEC>(sa, sb, As[t % 2], Bs[t % 2]);
        });
#elif DOUBLE_BUFFER
    fetch<VEC, FULL>(g, 0, sa, sb);
    stash<VEC>(sa, sb, As[0], Bs[0]);
    __syncthreads();
    for (int t = 0; t < ntiles; ++t) {
        if (t + 1 < ntiles) fetch<VEC, FULL>(g, (t + 1) * BK, sa, sb);  // in flight while tile t is computed
        compute(af + t % 2 * A_SIZE, bf + t % 2 * B_SIZE, acc);
        if (t + 1 < ntiles) stash<VEC>(sa, sb, As[(t + 1) % 2], Bs[(t + 1) % 2]);
        __syncthreads();  // one barrier: stage (t + 1) % 2 was last read before the previous one
    }
#else
    for (int t = 0; t < ntiles; ++t) {
        fetch<VEC, FULL>(g, t * BK, sa, sb);
        stash<VEC>(sa, sb, As[0], Bs[0]);
        __syncthreads();
        compute(af, bf, acc);
        __syncthreads();
    }
#endif
#endif
}
#endif

// ---- C --------------------------------------------------------------------------------------
#if TC
// MMA accumulator registers 0, 1 (2, 3) are row g (g + 8), columns 2t and 2t + 1 of their tile.
__device__ __forceinline__ void store(float* C, int M, int N, int m0, int n0, const AccTile& acc) {
    int wm, wn, g, t;
    warp_at(wm, wn, g, t);
#if VEC4
    const bool pairs = N % 2 == 0 && ((size_t)C & 7) == 0;  // float2 stores (n is even)
#endif
#pragma unroll
    for (int i = 0; i < RM; i += 2) {  // i = 4 * mi + 2 * h: row 16 * mi + 8 * h + g
        const int m = m0 + wm + 16 * (i / 4) + 8 * (i / 2 % 2) + g;
        if (m >= M) continue;
        float* crow = C + (size_t)m * N;
#pragma unroll
        for (int j = 0; j < RN; ++j) {
            const int n = n0 + wn + 8 * j + 2 * t;
#if VEC4
            if (pairs) {
                if (n < N) *reinterpret_cast<float2*>(crow + n) = make_float2(acc[i][j], acc[i + 1][j]);
                continue;
            }
#endif
            if (n < N) crow[n] = acc[i][j];
            if (n + 1 < N) crow[n + 1] = acc[i + 1][j];
        }
    }
}
#else
__device__ __forceinline__ void store(float* C, int M, int N, int m0, int n0, const AccTile& acc) {
#if VEC4
    const bool vc = RN >= 4 && N % 4 == 0 && ((size_t)C & 15) == 0;
#endif
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        const int m = m0 + tile_row(i);
        if (m >= M) continue;
        float* crow = C + (size_t)m * N;
#if VEC4
        if constexpr (RN >= 4) {
            if (vc) {
#pragma unroll
                for (int q = 0; q < RN / 4; ++q) {
                    const int n = n0 + tile_col(4 * q);  // a multiple of 4: the float4 is inside or past N
                    if (n < N)
                        *reinterpret_cast<float4*>(crow + n) =
                            make_float4(acc[i][4 * q], acc[i][4 * q + 1], acc[i][4 * q + 2], acc[i][4 * q + 3]);
                }
                continue;
            }
        }
#endif
#pragma unroll
        for (int j = 0; j < RN; ++j) {
            const int n = n0 + tile_col(j);
            if (n < N) crow[n] = acc[i][j];
        }
    }
}
#endif

extern "C" __global__ void BOUNDS sgemm_template(const float* A, const float* B, float* C, int M, int N, int K) {
#if BLOCK_SWIZZLE
    // Block i of the launch (row-major over the grid) takes the band of 16 block rows it falls in,
    // column by column: a bijection for any grid, the last band possibly narrower.
    const int bid = blockIdx.y * gridDim.x + blockIdx.x, band = bid / (16 * gridDim.x);
    const int rows = min(16, (int)gridDim.y - 16 * band), in_band = bid - band * 16 * gridDim.x;
    const int m0 = (16 * band + in_band % rows) * BM, n0 = in_band / rows * BN;
#else
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
#endif
    AccTile acc;
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) acc[i][j] = 0.0f;

#if SMEM_TILE
    __shared__ __align__(16) float As[STAGES][A_SIZE];
    __shared__ __align__(16) float Bs[STAGES][B_SIZE];
    const Operands g{A, B, M, N, K, m0, n0};
#if FULL_TILES
    const bool full = m0 + BM <= M && n0 + BN <= N && K % BK == 0;
#endif
#if VEC4
    if (K % 4 == 0 && N % 4 == 0 && ((size_t)A & 15) == 0 && ((size_t)B & 15) == 0) {
#if FULL_TILES
        if (full) gemm_tiled<true, true>(g, As, Bs, acc);
        else
#endif
            gemm_tiled<true, false>(g, As, Bs, acc);
    } else
#endif
    {
#if FULL_TILES
        if (full) gemm_tiled<false, true>(g, As, Bs, acc);
        else
#endif
            gemm_tiled<false, false>(g, As, Bs, acc);
    }
#else
    gemm_direct(A, B, M, N, K, m0, n0, acc);
#endif
    store(C, M, N, m0, n0, acc);
}
