/* fsr
[tunables]
BLOCK_M = [128, 64]  # query rows per block, 16 per warp (8 or 4 warps)
BLOCK_N = [64, 32]   # keys per K/V tile in shared memory (scores of a tile: BLOCK_N / 2 registers a thread)
STAGES = [2, 1]      # K/V tiles in shared memory: 2 copies tile t + 1 (cp.async) while tile t is computed

[features]
SWIZZLE = [0, 1]        # XOR-swizzled 16-byte chunks in the shared tiles instead of rows padded by 16 bytes (less shared memory, conflict-free either way)
FULL_TILES = [0, 1]     # key tiles wholly inside seq are copied without bounds checks and scored without the mask (CAUSAL: those wholly at or before a warp's rows)
FRAG_PREFETCH = [0, 1]  # ldmatrix of K's and V's next k16 step issued before the MMAs of this one (two fragment sets)
FAST_MATH = [0, 1]      # ex2.approx for the exponentials and one __fdividef reciprocal per row (else exp2f and a division per element)
VEC4 = [0, 1]           # o staged in shared memory (the warp's own Q rows), then written in 16-byte vectors where o is 16-byte aligned
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__(threads, 1): registers allotted for the block size

[[launch]]
kernel = "attention_bf16_template"
grid = ["cdiv(seq, BLOCK_M)", "bh"]
block = ["2 * BLOCK_M"]
smem = "2 * (136 - 8 * SWIZZLE) * (BLOCK_M + 2 * STAGES * BLOCK_N)"
args = ["q", "k", "v", "o", "bh", "seq"]
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
// element by element instead of copied with cp.async.
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
