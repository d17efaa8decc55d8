/* fsr
[tunables]
BLOCK_M = [128, 64]  # query rows per block, 16 per warp (8 or 4 warps)
BLOCK_N = [64, 32]   # keys per K/V tile in shared memory (scores of a tile: BLOCK_N / 2 registers a thread)
STAGES = [2, 1]      # K/V tiles in shared memory: 2 copies tile t + 1 (cp.async) while tile t is computed
WG_BLOCK_N = [128, 176, 64]  # WGMMA: keys per K/V tile (the n of S = Q K^T's wgmma: S is WG_BLOCK_N / 2 registers a thread)
WG_STAGES = [3, 2]           # WGMMA: K/V tiles in the TMA ring, capped so that they fit 227 KiB (3 at 128 keys: 0.89x cuDNN against 0.76x with 2, H200)
WG_CONSUMERS = [2, 1]        # WGMMA: consumer warp groups of 64 query rows each (WG_BM = 64 WG_CONSUMERS rows a block)

[features]
SWIZZLE = [0, 1]        # XOR-swizzled 16-byte chunks in the shared tiles instead of rows padded by 16 bytes (less shared memory, conflict-free either way)
FULL_TILES = [0, 1]     # key tiles wholly inside seq are copied without bounds checks and scored without the mask (CAUSAL: those wholly at or before a warp's rows)
FRAG_PREFETCH = [0, 1]  # ldmatrix of K's and V's next k16 step issued before the MMAs of this one (two fragment sets)
FAST_MATH = [0, 1]      # ex2.approx for the exponentials and one __fdividef reciprocal per row (else exp2f and a division per element)
VEC4 = [0, 1]           # o staged in shared memory (the warp's own Q rows), then written in 16-byte vectors where o is 16-byte aligned
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__(threads, 1): registers allotted for the block size
WGMMA = [0, 1]          # Hopper's path (sm_90a): Q, K, V by TMA into 128-byte-swizzled tiles on mbarriers, a producer warp group, consumer groups doing S = Q K^T and O += P V with wgmma (P from registers)
WG_OVERLAP = [0, 1]     # WGMMA: Q K^T of tile t + 1 issued before P V of tile t, so the softmax of t + 1 runs under P V (FlashAttention-3's intra-warpgroup overlap)
WG_PINGPONG = [0, 1]    # WGMMA with 2 consumers: the groups take turns issuing their wgmmas (named barriers), one's softmax under the other's products

[[tensormap]]
name = "q_tiles"
buffer = "q"
dims = ["128", "seq", "bh"]  # rank 3: a box past a head's last row is zero-filled, not the next head's
box = ["64", "64 * WG_CONSUMERS", "1"]  # half a row (128 bytes, the swizzle's span) of the block's rows
swizzle = "128B"

[[tensormap]]
name = "k_tiles"
buffer = "k"
dims = ["128", "seq", "bh"]
box = ["64", "WG_BLOCK_N", "1"]
swizzle = "128B"

[[tensormap]]
name = "v_tiles"
buffer = "v"
dims = ["128", "seq", "bh"]
box = ["64", "WG_BLOCK_N", "1"]
swizzle = "128B"

[[launch]]
kernel = "attention_bf16_template"
when = "WGMMA == 0"
grid = ["cdiv(seq, BLOCK_M)", "bh"]
block = ["2 * BLOCK_M"]
smem = "2 * (136 - 8 * SWIZZLE) * (BLOCK_M + 2 * STAGES * BLOCK_N)"
args = ["q", "k", "v", "o", "bh", "seq"]

[[launch]]
kernel = "attention_bf16_wgmma"
when = "WGMMA == 1"
grid = ["cdiv(seq, 64 * WG_CONSUMERS)", "bh"]
block = ["128 * (WG_CONSUMERS + 1)"]
smem = "2048 + 16384 * WG_CONSUMERS + min(WG_STAGES, (230400 - 16384 * WG_CONSUMERS) // (512 * WG_BLOCK_N)) * 512 * WG_BLOCK_N"
args = ["q_tiles", "k_tiles", "v_tiles", "o", "bh", "seq"]
*/
// Feature template: o = softmax(q k^T / sqrt(128)) v per head in bfloat16 on the tensor cores,
// FlashAttention-2 style; with CAUSAL 1 (a task's define: attention_bf16_causal) key j > query i is
// masked. A block takes BLOCK_M query rows of head blockIdx.y, 16 per warp; Q is copied to shared
// memory once and kept in registers as MMA A-fragments. K and V go by in tiles of BLOCK_N keys
// copied with cp.async (STAGES in flight). Per tile a warp computes S = Q K^T with mma.sync
// m16n8k16 (bf16 in, f32 accumulators; K fragments by ldmatrix), the online softmax in registers
// (exp2 with log2(e) / sqrt(128) folded into the scale; a row's max and sum over the four lanes
// that hold it by shuffles), then rounds P to bfloat16 straight from the accumulator layout into
// A-fragments and adds P V (V fragments by ldmatrix.trans) to float32 accumulators. Keys past seq
// are zero-filled and masked to -inf, and with CAUSAL so are keys past a row's own: key tiles
// wholly past a block's last row are neither copied nor computed, a warp skips the MMAs of those
// wholly past its own rows, and blocks start from the last rows (the most tiles) so that the short
// ones fill the end. Query rows past seq are computed from zeros and not stored. Every combination
// is correct for any bh and seq: where q, k or v is not 16-byte aligned the tiles are gathered
// element by element instead of copied with cp.async. WGMMA: Hopper's own path (TMA, mbarriers,
// warp-specialised groups, wgmma for both products) at the end of the file.
#ifndef CAUSAL
#define CAUSAL 0  // a variant's define (task.toml `template`), not a switch: it changes the op
#endif
#include <cuda_bf16.h>

#define D 128                    // head dimension
#define NW (BLOCK_M / 16)        // warps
#define NT (32 * NW)             // threads
#define NTILE (BLOCK_N / 8)      // n8 tiles of a score tile
#define KSTEPS (D / 16)          // k16 steps of Q K^T
#define PSTEPS (BLOCK_N / 16)    // k16 steps of P V
#define CPR (D / 8)              // 16-byte chunks in a row
#define SCALE_LOG2 0.12751743074f  // log2(e) / sqrt(128)
static_assert(BLOCK_M % 16 == 0 && BLOCK_N % 16 == 0, "whole m16 and k16 tiles");

#if SWIZZLE
#define LD D  // elements between rows of a shared tile
#else
#define LD (D + 8)  // 16 bytes of padding: the 8 rows one ldmatrix reads fall in 8 different bank groups
#endif
#define Q_TILE (BLOCK_M * LD)
#define KV_TILE (BLOCK_N * LD)

#if LAUNCH_BOUNDS
#define BOUNDS __launch_bounds__(NT, 1)
#else
#define BOUNDS
#endif

// Element offset of 16-byte chunk c of row r of a shared tile. With SWIZZLE the chunk index's low
// three bits are XORed with the row's: the 8 rows one ldmatrix reads at one chunk land in the 8
// different 16-byte positions of a 128-byte line.
__device__ __forceinline__ int chunk_at(int r, int c) {
#if SWIZZLE
    return r * D + ((c ^ (r & 7)) << 3);
#else
    return r * LD + c * 8;
#endif
}

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

// Rows [r0, r0 + ROWS) of a (seq, 128) matrix into shared tile dst, zeros past seq. A thread
// takes chunks tid, tid + NT, ...: consecutive threads copy consecutive 16 bytes of a row. vec:
// cp.async (the matrix is 16-byte aligned); else each chunk gathered by 2-byte loads and stored
// at once (the pipeline's barriers cover it as they cover the copies). FULL: no bounds checks.
template <int ROWS, bool FULL>
__device__ __forceinline__ void load_rows(__nv_bfloat16* dst, const __nv_bfloat16* src, int r0, int seq, bool vec) {
    static_assert(ROWS * CPR % NT == 0, "every thread copies as many chunks");
#pragma unroll
    for (int i = threadIdx.x; i < ROWS * CPR; i += NT) {
        const int r = i / CPR, c = i % CPR;
        const bool ok = FULL || r0 + r < seq;
        const __nv_bfloat16* from = src + ((size_t)(ok ? r0 + r : 0) * D + 8 * c);
        __nv_bfloat16* to = dst + chunk_at(r, c);
        if (FULL || vec) {
            copy16(smem_u32(to), from, ok);
        } else {
            const unsigned short* p = reinterpret_cast<const unsigned short*>(from);
            unsigned* w = reinterpret_cast<unsigned*>(to);
#pragma unroll
            for (int j = 0; j < 4; ++j) w[j] = ok ? (unsigned)p[2 * j] | (unsigned)p[2 * j + 1] << 16 : 0u;
        }
    }
}

// ---- shared -> tensor cores --------------------------------------------------------------------
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void mma_bf16(float* c, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#if FAST_MATH
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
#define EXP2(x) ex2_approx(x)
#else
#define EXP2(x) exp2f(x)
#endif

// Lane layout of an m16n8k16 MMA (PTX ISA): g = lane / 4, t = lane % 4. A-fragment registers
// a0..a3 hold rows g, g + 8, g, g + 8 and columns 2t, 2t + 1 (+ 8 for a2, a3); B-fragment b0, b1
// rows 2t, 2t + 1 (+ 8 for b1) of column g; accumulators c0, c1 row g, c2, c3 row g + 8, columns
// 2t and 2t + 1. A thread thus holds two rows of the warp's 16: g and g + 8.
typedef float Scores[NTILE][4];  // S tile's n8 tiles (keys 8n..8n+7 of the tile)
typedef float Out[D / 8][4];     // O's n8 tiles (dims 8n..8n+7)

struct Row {
    float m[2];  // running max of the scaled scores of rows g and g + 8 (log2 units)
    float l[2];  // this thread's part of the sum of exp2(s - m): its columns only
};

// K fragments (b0, b1 of key tiles 2p and 2p + 1) of k16 step s, for every pair p. ldmatrix lane
// l addresses key row l % 8 + 8 (l / 16) and dim chunk 2s + (l / 8) % 2: its four 8x8 matrices
// are b0 and b1 of key tile 2p, then of 2p + 1.
__device__ __forceinline__ void k_frags(const __nv_bfloat16* ks, int s, unsigned (&b)[NTILE / 2][4]) {
    const int lane = threadIdx.x % 32, r = lane % 8 + 8 * (lane / 16), c = 2 * s + (lane / 8) % 2;
#pragma unroll
    for (int p = 0; p < NTILE / 2; ++p) ldmatrix_x4(b[p], smem_u32(ks + chunk_at(16 * p + r, c)));
}

// S = Q K^T for the tile in ks (unscaled).
__device__ __forceinline__ void scores(const unsigned (&qf)[KSTEPS][4], const __nv_bfloat16* ks, Scores& s) {
#pragma unroll
    for (int n = 0; n < NTILE; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) s[n][r] = 0.0f;
#if FRAG_PREFETCH
    unsigned b[2][NTILE / 2][4];
    k_frags(ks, 0, b[0]);
#pragma unroll
    for (int st = 0; st < KSTEPS; ++st) {
        if (st + 1 < KSTEPS) k_frags(ks, st + 1, b[(st + 1) % 2]);
#pragma unroll
        for (int p = 0; p < NTILE / 2; ++p) {
            mma_bf16(s[2 * p], qf[st], b[st % 2][p]);
            mma_bf16(s[2 * p + 1], qf[st], b[st % 2][p] + 2);
        }
    }
#else
#pragma unroll
    for (int st = 0; st < KSTEPS; ++st) {
        unsigned b[NTILE / 2][4];
        k_frags(ks, st, b);
#pragma unroll
        for (int p = 0; p < NTILE / 2; ++p) {
            mma_bf16(s[2 * p], qf[st], b[p]);
            mma_bf16(s[2 * p + 1], qf[st], b[p] + 2);
        }
    }
#endif
}

// The online softmax of one tile: scores scaled to log2 units, keys at or past `valid` (the tile's
// keys inside seq) or, with CAUSAL, past `diag` (row g's own key, as an index into the tile; row
// g + 8's is 8 more) masked unless FULL, each row's new max over the quad, O and l rescaled, and
// s replaced by p = exp2(s - m).
#if CAUSAL
#define MASKED(key, r) ((key) < valid && (key) <= diag + 8 * ((r) / 2))
#else
#define MASKED(key, r) ((key) < valid)
#endif
template <bool FULL>
__device__ __forceinline__ void softmax(Scores& s, Row& row, Out& o, int valid, int diag) {
    const int t = threadIdx.x % 4;
    float mx[2] = {row.m[0], row.m[1]};
#pragma unroll
    for (int n = 0; n < NTILE; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int key = 8 * n + 2 * t + r % 2;
            s[n][r] = FULL || MASKED(key, r) ? s[n][r] * SCALE_LOG2 : -INFINITY;
            mx[r / 2] = fmaxf(mx[r / 2], s[n][r]);
        }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    }
    // Every row has a key in the first tile (key 0): mx is finite from then on, and the correction
    // is 0 there (m -inf) and, with CAUSAL, 1 in a tile wholly masked for the row.
    const float corr[2] = {EXP2(row.m[0] - mx[0]), EXP2(row.m[1] - mx[1])};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        row.m[h] = mx[h];
        row.l[h] *= corr[h];
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) o[n][r] *= corr[r / 2];
#pragma unroll
    for (int n = 0; n < NTILE; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            s[n][r] = EXP2(s[n][r] - row.m[r / 2]);  // exp2(-inf) = 0 for masked keys
            row.l[r / 2] += s[n][r];
        }
}

__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo in the low 16 bits
    return *reinterpret_cast<const unsigned*>(&v);
}

// V fragments of k16 step kk of P V (keys 16kk..16kk+15): for dim tile pair dp, b0, b1 of dim tile
// 2dp then of 2dp + 1. ldmatrix.trans lane l addresses key row 16kk + l % 16, dim chunk 2dp + l / 16.
__device__ __forceinline__ void v_frags(const __nv_bfloat16* vs, int kk, unsigned (&b)[D / 16][4]) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp)
        ldmatrix_x4_trans(b[dp], smem_u32(vs + chunk_at(16 * kk + lane % 16, 2 * dp + lane / 16)));
}

// O += P V, P (in s) rounded to bfloat16: the accumulators of key tiles 2kk and 2kk + 1 are
// exactly the A-fragment of k16 step kk (rows g, g + 8; keys 2t, 2t + 1 and 8 more).
__device__ __forceinline__ void accumulate(const Scores& s, const __nv_bfloat16* vs, Out& o) {
#if FRAG_PREFETCH
    unsigned b[2][D / 16][4];
    v_frags(vs, 0, b[0]);
#endif
#pragma unroll
    for (int kk = 0; kk < PSTEPS; ++kk) {
        const unsigned a[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                               pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#if FRAG_PREFETCH
        if (kk + 1 < PSTEPS) v_frags(vs, kk + 1, b[(kk + 1) % 2]);
        unsigned (&bk)[D / 16][4] = b[kk % 2];
#else
        unsigned bk[D / 16][4];
        v_frags(vs, kk, bk);
#endif
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
            mma_bf16(o[2 * dp], a, bk[dp]);
            mma_bf16(o[2 * dp + 1], a, bk[dp] + 2);
        }
    }
}

struct Head {
    const __nv_bfloat16 *k, *v;  // this head's rows
    int seq;
    bool vec;  // q, k, v 16-byte aligned: cp.async
};

// Key tile kt of K and V into stage buffers ks, vs.
template <bool FULL>
__device__ __forceinline__ void load_kv(const Head& h, int kt, __nv_bfloat16* ks, __nv_bfloat16* vs) {
    load_rows<BLOCK_N, FULL>(ks, h.k, kt * BLOCK_N, h.seq, h.vec);
    load_rows<BLOCK_N, FULL>(vs, h.v, kt * BLOCK_N, h.seq, h.vec);
}

__device__ __forceinline__ void load_tile(const Head& h, int kt, __nv_bfloat16* ks, __nv_bfloat16* vs) {
#if FULL_TILES
    if (h.vec && (kt + 1) * BLOCK_N <= h.seq) {
        load_kv<true>(h, kt, ks, vs);
        return;
    }
#endif
    load_kv<false>(h, kt, ks, vs);
}

// Tile kt (in ks, vs) into the softmax state and O of the warp whose rows start at query w.
__device__ __forceinline__ void attend_tile(const unsigned (&qf)[KSTEPS][4], const __nv_bfloat16* ks,
                                           const __nv_bfloat16* vs, int kt, int seq, int w, Row& row, Out& o) {
    const int j0 = kt * BLOCK_N;
#if CAUSAL
    if (j0 > w + 15) return;  // every key past every row of the warp: p = 0 throughout (warp-uniform)
#endif
    Scores s;
    scores(qf, ks, s);
    const int valid = seq - j0, diag = w + threadIdx.x % 32 / 4 - j0;
#if FULL_TILES  // unmasked: every key inside seq and, with CAUSAL, at or before every row's own
    if (valid >= BLOCK_N && (!CAUSAL || j0 + BLOCK_N - 1 <= w)) softmax<true>(s, row, o, valid, diag);
    else
#endif
        softmax<false>(s, row, o, valid, diag);
    accumulate(s, vs, o);
}

// ---- o -----------------------------------------------------------------------------------------
// An accumulator over its row's sum of weights: one reciprocal a row (the compiler keeps it) or a
// division each.
__device__ __forceinline__ float normalise(float x, float l) {
#if FAST_MATH
    return x * __fdividef(1.0f, l);
#else
    return x / l;
#endif
}

#if VEC4
// The warp's 16 rows through its own rows of the Q tile (no other warp reads them), then whole
// 16-byte chunks of rows of o.
__device__ __forceinline__ void store(__nv_bfloat16* oh, int m0, int seq, const Out& o, const float (&l)[2],
                                      __nv_bfloat16* qs) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, w0 = threadIdx.x / 32 * 16;
    __syncwarp();  // the compiler does not see ldmatrix read these rows: no store moves above it
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const unsigned v = pack_bf16(normalise(o[n][2 * h], l[h]), normalise(o[n][2 * h + 1], l[h]));
            *reinterpret_cast<unsigned*>(qs + chunk_at(w0 + g + 8 * h, n) + 2 * t) = v;
        }
    __syncwarp();
    const bool vec = ((size_t)oh & 15) == 0;
#pragma unroll
    for (int i = lane; i < 16 * CPR; i += 32) {
        const int r = i / CPR, c = i % CPR, m = m0 + w0 + r;
        if (m >= seq) continue;
        const uint4 chunk = *reinterpret_cast<const uint4*>(qs + chunk_at(w0 + r, c));
        __nv_bfloat16* dst = oh + (size_t)m * D + 8 * c;
        if (vec) {
            *reinterpret_cast<uint4*>(dst) = chunk;
        } else {
            const unsigned short* e = reinterpret_cast<const unsigned short*>(&chunk);
            for (int j = 0; j < 8; ++j) reinterpret_cast<unsigned short*>(dst)[j] = e[j];
        }
    }
}
#else
// Accumulators straight to o: pairs of columns as one 4-byte word where o is 4-byte aligned.
__device__ __forceinline__ void store(__nv_bfloat16* oh, int m0, int seq, const Out& o, const float (&l)[2],
                                      __nv_bfloat16*) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, w0 = threadIdx.x / 32 * 16;
    const bool pairs = ((size_t)oh & 3) == 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int m = m0 + w0 + g + 8 * h;
        if (m >= seq) continue;
        __nv_bfloat16* orow = oh + (size_t)m * D;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            const float x = normalise(o[n][2 * h], l[h]), y = normalise(o[n][2 * h + 1], l[h]);
            if (pairs) {
                *reinterpret_cast<unsigned*>(orow + 8 * n + 2 * t) = pack_bf16(x, y);
            } else {
                orow[8 * n + 2 * t] = __float2bfloat16_rn(x);
                orow[8 * n + 2 * t + 1] = __float2bfloat16_rn(y);
            }
        }
    }
}
#endif

extern "C" __global__ void BOUNDS attention_bf16_template(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                          const __nv_bfloat16* v, __nv_bfloat16* o, int bh,
                                                          int seq) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);
    __nv_bfloat16* kbuf = qs + Q_TILE;               // STAGES K tiles
    __nv_bfloat16* vbuf = kbuf + STAGES * KV_TILE;   // STAGES V tiles
    const size_t head = (size_t)blockIdx.y * seq * D;
#if CAUSAL
    const int m0 = (gridDim.x - 1 - blockIdx.x) * BLOCK_M;  // the last rows, with the most keys, first
    const int ntiles = (min(m0 + BLOCK_M, seq) + BLOCK_N - 1) / BLOCK_N;  // keys up to the block's last row
#else
    const int m0 = blockIdx.x * BLOCK_M, ntiles = (seq + BLOCK_N - 1) / BLOCK_N;
#endif
    const bool vec = (((size_t)q | (size_t)k | (size_t)v) & 15) == 0;
    const Head h{k + head, v + head, seq, vec};

    // Q, then the first STAGES - 1 K/V tiles, each its own copy group.
    load_rows<BLOCK_M, false>(qs, q + head, m0, seq, vec);
    copy_commit();
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
        if (st < ntiles) load_tile(h, st, kbuf + st * KV_TILE, vbuf + st * KV_TILE);
        copy_commit();
    }
    copy_wait<STAGES - 1>();  // Q has landed
    __syncthreads();
    unsigned qf[KSTEPS][4];  // the warp's 16 rows of Q as A-fragments: lane l addresses row l % 16, chunk 2s + l / 16
    {
        const int lane = threadIdx.x % 32, w0 = threadIdx.x / 32 * 16;
#pragma unroll
        for (int st = 0; st < KSTEPS; ++st)
            ldmatrix_x4(qf[st], smem_u32(qs + chunk_at(w0 + lane % 16, 2 * st + lane / 16)));
    }

    Row row = {{-INFINITY, -INFINITY}, {0.0f, 0.0f}};
    Out acc;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[n][r] = 0.0f;

    // One barrier a tile with STAGES 2: at iteration t tile t has landed and every warp has
    // finished tile t - 1, whose stage then takes tile t + 1 while tile t is computed. With one
    // stage the tile is copied, waited for and computed, and a second barrier guards its refill.
    for (int t = 0; t < ntiles; ++t) {
#if STAGES == 1
        load_tile(h, t, kbuf, vbuf);
        copy_commit();
        copy_wait<0>();
        __syncthreads();
        attend_tile(qf, kbuf, vbuf, t, seq, m0 + threadIdx.x / 32 * 16, row, acc);
        __syncthreads();
#else
        copy_wait<STAGES - 2>();
        __syncthreads();
        const int next = t + STAGES - 1, sn = next % STAGES, sc = t % STAGES;
        if (next < ntiles) load_tile(h, next, kbuf + sn * KV_TILE, vbuf + sn * KV_TILE);
        copy_commit();
        attend_tile(qf, kbuf + sc * KV_TILE, vbuf + sc * KV_TILE, t, seq, m0 + threadIdx.x / 32 * 16, row, acc);
#endif
    }

    // The row sums over the quad, then o = O / l rounded once.
    float l[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        l[i] = row.l[i];
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
    store(o + head, m0, seq, acc, l, qs);
}


// ---- Hopper: TMA and wgmma, FlashAttention-3 style (WGMMA) -------------------------------------
// A block of 128 (WG_CONSUMERS + 1) threads takes WG_BM = 64 WG_CONSUMERS query rows of head
// blockIdx.y. Warp group 0 is the producer: one thread copies the block's Q once, then K and V
// tile by tile (WG_BN keys each) into a ring of WG_NSTAGES stages, all by TMA through rank-3
// tensor maps (dims 128, seq, bh: rows past a head's end arrive as zeros) with the 128-byte
// swizzle. A row of 128 dims is two boxes of 64 (the swizzle's 128-byte span), so a tile is two
// column halves one after the other, each `rows` x 128 bytes. K lands on the stage's `kfull`
// mbarrier and V on `vfull`, so S can start before V is in; each consumer warp frees the stage
// on `empty` once its products of it are done. Consumer warp group c (rows 64c.. of the block):
//   S = Q K^T   wgmma m64nWG_BNk16, both operands in shared memory, K-major (descriptors as the
//               gemm template's A: 32 bytes a k16 step within a swizzled row, 1024 between
//               groups of 8 rows), 8 k16 steps over the two column halves;
//   softmax     on S's registers: thread t of the group holds rows 16 (t / 32 % 4) + t % 32 / 4
//               and 8 more, keys 8 j + 2 (t % 4) and + 1 (register 4 j + 2 h + e), so a row's
//               max and sum go over the quad by two shuffles; scores in log2 units, keys at or
//               past seq (and with CAUSAL past the row's own) at -inf;
//   O += P V    P rounded to bfloat16 in registers: S's accumulators of key columns 16 kk..
//               16 kk + 15 are exactly the A fragment of k16 step kk (as mma.sync's), so wgmma
//               takes A from registers and V from shared memory, V k-by-n ("MN-major",
//               transposed: LBO from the dims 0..63 half to 64..127, SBO 1024 between groups of
//               8 keys, 2048 bytes a k16 step).
// WG_OVERLAP issues S of tile t + 1 before P V of tile t and waits for S alone, so the softmax
// of t + 1 runs under P V; O's rescaling for t + 1 follows P V's wait. WG_PINGPONG (2 consumers)
// makes the groups take turns at issuing (named barriers 1 and 2), one's softmax under the other's
// products. With CAUSAL, blocks run from the last rows; tiles wholly past the block's last row
// are neither copied nor multiplied. Every consumer takes every tile of its block (a loop bound
// that differed between the groups would make ptxas serialise the overlapped wgmmas): a tile
// wholly past group 0's rows is all -inf to it, p = 0 and the correction 1 (at WG_BLOCK_N 128 there
// is none). Every row has key 0 in tile 0, so its running max is finite from the first tile on.
// Query rows past seq are computed from zeros and not stored.
#define WG_BN WG_BLOCK_N
#define WG_BM (64 * WG_CONSUMERS)
#define WG_SN (WG_BN / 2)          // S registers a thread
#define WG_PK (WG_BN / 16)         // k16 steps of P V
#define WG_Q_BYTES (WG_BM * 256)   // Q: the block's rows, two column halves
#define WG_KV_BYTES (WG_BN * 256)  // one K or V tile: two column halves of WG_BN rows of 128 bytes
#define WG_STAGE_BYTES (2 * WG_KV_BYTES)
#define WG_FIT ((230400 - WG_Q_BYTES) / WG_STAGE_BYTES)
#define WG_NSTAGES (WG_STAGES < WG_FIT ? WG_STAGES : WG_FIT)  // as the header's smem
#define WG_PP (WG_PINGPONG && WG_CONSUMERS == 2)
// mbarriers after the stages: Q's, then kfull, vfull and empty of every stage
#define WG_QFULL(b) (b)
#define WG_KFULL(b, s) ((b) + 8 * (1 + (s)))
#define WG_VFULL(b, s) ((b) + 8 * (1 + WG_NSTAGES + (s)))
#define WG_EMPTY(b, s) ((b) + 8 * (1 + 2 * WG_NSTAGES + (s)))

#if WGMMA && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
// fsr compiles for the arch-specific variant (sm_90a) where the plain arch's compile says an
// instruction is not supported on its target: said here, by the preprocessor, it spares a whole
// plain compile that ptxas would refuse at its end.
#error "wgmma and setmaxnreg are not supported on .target 'sm_90': WGMMA needs sm_90a"
#endif
#if WGMMA
static_assert(WG_BN % 16 == 0 && WG_BN >= 64 && WG_BN <= 256, "wgmma n: whole k16 steps of P V");
static_assert(WG_CONSUMERS == 1 || WG_CONSUMERS == 2, "one or two consumer groups");
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
// One box of `map` at (x, y, z), innermost first, into shared dst; completes its bytes on bar.
__device__ __forceinline__ void tma_load(unsigned dst, const CUtensorMap* map, int x, int y, int z, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                 ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(z), "r"(bar) : "memory");
}
// Both column halves of rows [y, y + rows) of head z: the half of dims 64.. `rows` x 128 bytes on.
__device__ __forceinline__ void tma_rows(unsigned dst, const CUtensorMap* map, int rows, int y, int z, unsigned bar) {
    tma_load(dst, map, 0, y, z, bar);
    tma_load(dst + rows * 128, map, 64, y, z, bar);
}

// A shared-memory matrix descriptor: start address, leading and stride byte offsets (16-byte
// units), 128-byte swizzle (mode 1 in bits 62-63).
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (unsigned long long)(lbo >> 4) << 16 |
           (unsigned long long)(sbo >> 4) << 32 | 1ull << 62;
}

#define WG_F8(x, i) "+f"(x[i]), "+f"(x[i + 1]), "+f"(x[i + 2]), "+f"(x[i + 3]), "+f"(x[i + 4]), "+f"(x[i + 5]), \
    "+f"(x[i + 6]), "+f"(x[i + 7])
#define WG_F32(x, i) WG_F8(x, i), WG_F8(x, i + 8), WG_F8(x, i + 16), WG_F8(x, i + 24)
#define WG_F64(x, i) WG_F32(x, i), WG_F32(x, i + 32)
#define WG_F88(x, i) WG_F64(x, i), WG_F8(x, i + 64), WG_F8(x, i + 72), WG_F8(x, i + 80)
#define WG_R32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "     \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_R64 WG_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_R88 WG_R64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87"

// s (64 x WG_BN) = (acc ? s : 0) + a (64 x 16 of Q, K-major) times b (16 x WG_BN of K^T: K's rows,
// K-major, not transposed).
__device__ __forceinline__ void wg_qk(float (&s)[WG_SN], unsigned long long a, unsigned long long b, int acc) {
#if WG_BN == 64
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_R32 "}, %32, %33, p, 1, 1, 0, 0;\n}"
                 : WG_F32(s, 0) : "l"(a), "l"(b), "r"(acc));
#elif WG_BN == 128
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_R64 "}, %64, %65, p, 1, 1, 0, 0;\n}"
                 : WG_F64(s, 0) : "l"(a), "l"(b), "r"(acc));
#elif WG_BN == 176
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 {" WG_R88 "}, %88, %89, p, 1, 1, 0, 0;\n}"
                 : WG_F88(s, 0) : "l"(a), "l"(b), "r"(acc));
#else
#error "WG_BLOCK_N: 64, 128 or 176"
#endif
}
// o (64 x 128) += a (64 x 16 of P: four registers a thread, mma.sync's A-fragment layout per warp)
// times b (16 x 128 of V: k-by-n, transposed, the last immediate).
__device__ __forceinline__ void wg_pv(float (&o)[64], const unsigned (&a)[4], unsigned long long b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_R64 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}"
                 : WG_F64(o, 0) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Registers the compiler must see as written here (after a wait: no read of an accumulator moves
// above it) and read here (before a fence: no write to an operand sinks below it).
template <int N>
__device__ __forceinline__ void wg_pin(float (&x)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(x[i])::"memory");
}
__device__ __forceinline__ void wg_pin(unsigned (&p)[WG_PK][4]) {
#pragma unroll
    for (int i = 0; i < WG_PK; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(p[i][j])::"memory");
}
template <int W, int N>
__device__ __forceinline__ void wg_wait(float (&x)[N]) {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(W) : "memory");
    wg_pin(x);
}

// Consumer c's turn at issuing wgmmas (WG_PP), and the other's after it. Both groups take as many
// turns; group 1 opens group 0's first turn and skips its own last hand-over, so that both named
// barriers end with no arrivals left over.
__device__ __forceinline__ void wg_turn(int c) {
#if WG_PP
    asm volatile("bar.sync %0, 256;" ::"r"(1 + c) : "memory");
#endif
}
__device__ __forceinline__ void wg_pass(int c, bool last) {
#if WG_PP
    if (!(c == 1 && last)) asm volatile("bar.arrive %0, 256;" ::"r"(2 - c) : "memory");
#endif
}

struct WgJob {
    unsigned q;       // this consumer's m64 tile of Q (its first column half)
    unsigned stages;  // stage 0's K tile; V after it, stage s + 1 WG_STAGE_BYTES on
    unsigned bars;
    int seq, r0;      // r0: this thread's first row (query index); its second is r0 + 8
    int first;        // the block's first row
    int total;        // key tiles the block needs (all of them, or with CAUSAL up to its last row)
    int c;
};

// S = Q K^T for the K tile at k: 8 k16 steps, 4 in each column half.
__device__ __forceinline__ void wg_scores(float (&s)[WG_SN], unsigned q, unsigned k) {
#pragma unroll
    for (int st = 0; st < 8; ++st)
        wg_qk(s, wg_desc(q + st / 4 * WG_Q_BYTES / 2 + 32 * (st % 4), 16, 1024),
              wg_desc(k + st / 4 * WG_BN * 128 + 32 * (st % 4), 16, 1024), st);
}
// O += P V for the V tile at v: WG_PK k16 steps of 16 keys (2048 bytes) each.
__device__ __forceinline__ void wg_values(float (&o)[64], const unsigned (&p)[WG_PK][4], unsigned v) {
#pragma unroll
    for (int kk = 0; kk < WG_PK; ++kk) wg_pv(o, p[kk], wg_desc(v + 2048 * kk, WG_BN * 128, 1024));
}

struct WgRow {
    float m[2];  // running max of the scaled scores of rows r0 and r0 + 8 (log2 units)
    float l[2];  // this thread's part of the sum of exp2(s - m): its columns only
};

__device__ __forceinline__ float wg_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));  // ex2(-inf) = 0
    return y;
}

// The online softmax of the tile of keys key0..: s scaled to log2 units and masked (only where the
// tile has keys at or past seq or, with CAUSAL, past the block's first row: a condition the same
// in the whole warp group, else ptxas serialises the wgmmas around it), the rows' new maxima
// over the quad, corr = exp2(old max - new max) (0 at the first tile), l rescaled and s replaced
// by p = exp2(s - max). O is rescaled by the caller, after any P V still in flight on it.
__device__ __forceinline__ void wg_softmax(float (&s)[WG_SN], WgRow& row, float (&corr)[2], int key0, const WgJob& jb) {
    const int t = threadIdx.x % 4;
    const bool edge = key0 + WG_BN > jb.seq || (CAUSAL && key0 + WG_BN - 1 > jb.first);
    float mx[2] = {row.m[0], row.m[1]};
#pragma unroll
    for (int i = 0; i < WG_SN; ++i) {
        const int h = i / 2 % 2, key = key0 + 8 * (i / 4) + 2 * t + i % 2;
        float x = s[i] * SCALE_LOG2;
        if (edge && !(key < jb.seq && (!CAUSAL || key <= jb.r0 + 8 * h))) x = -INFINITY;
        s[i] = x;
        mx[h] = fmaxf(mx[h], x);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        corr[h] = wg_ex2(row.m[h] - mx[h]);
        row.m[h] = mx[h];
        row.l[h] *= corr[h];
    }
#pragma unroll
    for (int i = 0; i < WG_SN; ++i) {
        s[i] = wg_ex2(s[i] - row.m[i / 2 % 2]);
        row.l[i / 2 % 2] += s[i];
    }
}
__device__ __forceinline__ void wg_rescale(float (&o)[64], const float (&corr)[2]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] *= corr[i / 2 % 2];
}
// P in bfloat16 as the A fragments of P V's k16 steps: registers 8 kk.. of S hold key columns
// 16 kk + 2 (t % 4) (+ 1) for rows r0 (e 0, 1) and r0 + 8 (2, 3), then the same 8 keys on (4..7).
__device__ __forceinline__ void wg_probs(const float (&s)[WG_SN], unsigned (&p)[WG_PK][4]) {
#pragma unroll
    for (int kk = 0; kk < WG_PK; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) p[kk][r] = pack_bf16(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}

// The consumer's warps are done with stage st (each warp's own wgmmas waited for): one arrival a
// warp, 4 WG_CONSUMERS in all.
__device__ __forceinline__ void wg_release(unsigned bars, int st) {
    __syncwarp();
    if (threadIdx.x % 32 == 0) bar_arrive(WG_EMPTY(bars, st));
}
__device__ __forceinline__ void wg_next(int& st, unsigned& ph) {
    if (++st == WG_NSTAGES) st = 0, ph ^= 1;
}
__device__ __forceinline__ unsigned wg_k(const WgJob& jb, int st) { return jb.stages + st * WG_STAGE_BYTES; }

#if WG_OVERLAP
// S of tile 0, then per tile kt: S of kt and P V of kt - 1 issued, S waited for and its softmax
// done while P V runs, then P V waited for, its stage freed, O rescaled and P of kt made; the
// last P V at the end. A turn (WG_PP) covers each issue: total + 1 turns.
__device__ __forceinline__ void wg_consume(const WgJob& jb, float (&o)[64], WgRow& row) {
    float s[WG_SN], corr[2];
    unsigned p[WG_PK][4];
    int st = 0;
    unsigned ph = 0;
    bar_wait(WG_KFULL(jb.bars, 0), 0);
    wg_turn(jb.c);
    wg_fence();
    wg_scores(s, jb.q, wg_k(jb, 0));
    wg_commit();
    wg_pass(jb.c, false);
    wg_wait<0>(s);
    wg_softmax(s, row, corr, 0, jb);  // O is still 0: no rescaling
    wg_probs(s, p);
    for (int kt = 1; kt < jb.total; ++kt) {
        int sn = st;
        unsigned phn = ph;
        wg_next(sn, phn);
        bar_wait(WG_KFULL(jb.bars, sn), phn);
        wg_turn(jb.c);
        wg_pin(o);
        wg_pin(p);
        wg_fence();
        wg_scores(s, jb.q, wg_k(jb, sn));
        wg_commit();
        bar_wait(WG_VFULL(jb.bars, st), ph);
        wg_values(o, p, wg_k(jb, st) + WG_KV_BYTES);
        wg_commit();
        wg_pass(jb.c, false);
        wg_wait<1>(s);  // groups complete in order: S's, not P V's
        wg_softmax(s, row, corr, kt * WG_BN, jb);
        wg_wait<0>(o);
        wg_release(jb.bars, st);
        wg_rescale(o, corr);
        wg_probs(s, p);
        st = sn, ph = phn;
    }
    bar_wait(WG_VFULL(jb.bars, st), ph);
    wg_turn(jb.c);
    wg_pin(o);
    wg_pin(p);
    wg_fence();
    wg_values(o, p, wg_k(jb, st) + WG_KV_BYTES);
    wg_commit();
    wg_pass(jb.c, true);  // group 1's last turn
    wg_wait<0>(o);
    wg_release(jb.bars, st);
}
#else
// Per tile: S issued and waited for, the softmax, O rescaled, P V issued and waited for, the stage
// freed. A turn (WG_PP) covers the issue of S: total turns.
__device__ __forceinline__ void wg_consume(const WgJob& jb, float (&o)[64], WgRow& row) {
    float s[WG_SN], corr[2];
    unsigned p[WG_PK][4];
    int st = 0;
    unsigned ph = 0;
    for (int kt = 0; kt < jb.total; ++kt) {
        bar_wait(WG_KFULL(jb.bars, st), ph);
        wg_turn(jb.c);
        wg_fence();
        wg_scores(s, jb.q, wg_k(jb, st));
        wg_commit();
        wg_pass(jb.c, kt == jb.total - 1);
        wg_wait<0>(s);
        wg_softmax(s, row, corr, kt * WG_BN, jb);
        wg_rescale(o, corr);
        wg_probs(s, p);
        bar_wait(WG_VFULL(jb.bars, st), ph);
        wg_pin(o);
        wg_pin(p);
        wg_fence();
        wg_values(o, p, wg_k(jb, st) + WG_KV_BYTES);
        wg_commit();
        wg_wait<0>(o);
        wg_release(jb.bars, st);
        wg_next(st, ph);
    }
}
#endif

// The producer's one thread: Q, then K and V of every tile the block needs, each into its stage
// once every consumer warp freed it (a fresh barrier passes parity 1 at once). A box's bytes past
// seq are zeros and still count.
__device__ __forceinline__ void wg_produce(const CUtensorMap* qm, const CUtensorMap* km, const CUtensorMap* vm,
                                           unsigned base, unsigned bars, int m0, int head, int total) {
    bar_expect(WG_QFULL(bars), WG_Q_BYTES);
    tma_rows(base, qm, WG_BM, m0, head, WG_QFULL(bars));
    unsigned ph = 0;
    for (int kt = 0, st = 0; kt < total; ++kt) {
        bar_wait(WG_EMPTY(bars, st), ph ^ 1);
        const unsigned k = base + WG_Q_BYTES + st * WG_STAGE_BYTES;
        bar_expect(WG_KFULL(bars, st), WG_KV_BYTES);
        tma_rows(k, km, WG_BN, kt * WG_BN, head, WG_KFULL(bars, st));
        bar_expect(WG_VFULL(bars, st), WG_KV_BYTES);
        tma_rows(k + WG_KV_BYTES, vm, WG_BN, kt * WG_BN, head, WG_VFULL(bars, st));
        wg_next(st, ph);
    }
}

// o = O / l for the thread's two rows, those inside seq: accumulator 4 j + 2 h + e is dim
// 8 j + 2 (t % 4) + e of row r0 + 8 h; pairs of dims as one 4-byte word where o is 4-byte aligned.
__device__ __forceinline__ void wg_store(const float (&o)[64], const WgRow& row, __nv_bfloat16* oh, int seq, int r0) {
    const int t = threadIdx.x % 4;
    const bool pairs = ((size_t)oh & 3) == 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = row.l[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = 1.0f / l;
        if (r0 + 8 * h >= seq) continue;
        __nv_bfloat16* orow = oh + (size_t)(r0 + 8 * h) * D;
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
            const float x = o[4 * j + 2 * h] * inv, y = o[4 * j + 2 * h + 1] * inv;
            if (pairs) {
                *reinterpret_cast<unsigned*>(orow + 8 * j + 2 * t) = pack_bf16(x, y);
            } else {
                orow[8 * j + 2 * t] = __float2bfloat16_rn(x);
                orow[8 * j + 2 * t + 1] = __float2bfloat16_rn(y);
            }
        }
    }
}
#if WG_CONSUMERS > 1
// setmaxnreg needs a register cap at entry: 65536 / 384 threads, to a multiple of 8
#define WG_BOUNDS __maxnreg__(168)
#else
#define WG_BOUNDS
#endif
#else
#define WG_BOUNDS
#endif

extern "C" __global__ void WG_BOUNDS attention_bf16_wgmma(const __grid_constant__ CUtensorMap q_tiles,
                                                         const __grid_constant__ CUtensorMap k_tiles,
                                                         const __grid_constant__ CUtensorMap v_tiles,
                                                         __nv_bfloat16* o, int bh, int seq) {
#if WGMMA
    extern __shared__ __align__(1024) unsigned char wg_smem[];
    // the 128-byte swizzle repeats every 1024 bytes: Q and the stages start on such a boundary (the
    // header's smem has 1024 bytes for this and 1024 for the barriers after the stages)
    const unsigned base = (smem_u32(wg_smem) + 1023) & ~1023u, bars = base + WG_Q_BYTES + WG_NSTAGES * WG_STAGE_BYTES;
    if (threadIdx.x == 0) {
        bar_init(WG_QFULL(bars), 1);
        for (int s = 0; s < WG_NSTAGES; ++s) {
            bar_init(WG_KFULL(bars, s), 1);  // the producer's expect_tx
            bar_init(WG_VFULL(bars, s), 1);
            bar_init(WG_EMPTY(bars, s), 4 * WG_CONSUMERS);  // one arrival a consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    const int head = blockIdx.y;
#if CAUSAL
    const int m0 = (gridDim.x - 1 - blockIdx.x) * WG_BM;  // the last rows, with the most keys, first
    const int total = (min(m0 + WG_BM, seq) + WG_BN - 1) / WG_BN;  // keys up to the block's last row
#else
    const int m0 = blockIdx.x * WG_BM, total = (seq + WG_BN - 1) / WG_BN;
#endif
    const int group = threadIdx.x / 128;
    // Registers move within the block's pool, taken at launch (384 threads at the cap of 168):
    // 40 for the producer and 232 for each consumer make 64512 of those 64512.
    if (group == 0) {
#if WG_CONSUMERS > 1
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
#endif
        if (threadIdx.x == 0) wg_produce(&q_tiles, &k_tiles, &v_tiles, base, bars, m0, head, total);
        return;
    }
#if WG_CONSUMERS > 1
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
#endif
    const int c = group - 1;
    const int r0 = m0 + 64 * c + (int)(threadIdx.x / 32 % 4 * 16 + threadIdx.x % 32 / 4);
    const WgJob jb{base + c * 64 * 128, base + WG_Q_BYTES, bars, seq, r0, m0, total, c};
#if WG_PP
    if (c == 1) asm volatile("bar.arrive 1, 256;" ::: "memory");  // group 0 issues first
#endif
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    WgRow row = {{-INFINITY, -INFINITY}, {0.0f, 0.0f}};
    bar_wait(WG_QFULL(bars), 0);
    wg_consume(jb, acc, row);
    wg_store(acc, row, o + (size_t)head * seq * D, seq, jb.r0);
#endif
}
