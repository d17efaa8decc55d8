/* fsr
[tunables]
NT = [128, 64, 256]  # threads per block
BK = [32, 64, 16]    # keys per K/V tile staged in shared memory with SMEM_TILE
KC = [8, 16]         # keys per score chunk with SMEM_TILE: the online rescale happens once per chunk (KC <= BK)
SPLIT_D = [2, 4]     # threads sharing a query row with WARP_SHUFFLE

[features]
SMEM_TILE = [0, 1]      # K and V tiles of BK keys staged in shared memory by the block (else every thread reads global memory)
VEC4 = [0, 1]           # float4 loads of q, k, v and stores of o where the arrays are 16-byte aligned (else floats)
ONLINE = [0, 1]         # one pass over the keys, rescaling the sums when the running max grows (else a first pass for the max)
WARP_SHUFFLE = [0, 1]   # SPLIT_D threads share a query row, 64 / SPLIT_D dims each, dots summed by __shfl_xor_sync (else one)
FAST_MATH = [0, 1]      # __expf and one reciprocal per row (else expf and a division per dim)
READONLY = [0, 1]       # __restrict__ pointers and __ldg loads of q, k and v
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__(NT, 1): registers allotted for the block size

[[launch]]
kernel = "attention_template"
grid = ["cdiv(seq, NT // (1 + WARP_SHUFFLE * (SPLIT_D - 1)))", "bh"]
block = ["NT"]
args = ["q", "k", "v", "o", "bh", "seq"]
*/
// Feature template: o = softmax(q k^T / 8) v per head, q, k, v, o of shape (bh, seq, 64), float32.
// A block takes NT / TPR query rows of head blockIdx.y; a row's TPR threads hold its q and its
// output accumulator in registers, 64 / TPR dims each, interleaved W at a time so that a warp's
// reads of one key are contiguous. Keys go by in tiles of BK, scored KC at a time. Every
// combination of the switches above is a correct kernel for any bh and seq.

#define D 64  // head dimension
#if WARP_SHUFFLE
#define TPR SPLIT_D  // threads per query row
#else
#define TPR 1
#endif
#define DT (D / TPR)      // dims per thread
#define QPB (NT / TPR)    // query rows per block
#if SMEM_TILE
#define CH KC  // keys per chunk
#else
#define CH 1  // from global memory one key at a time: a chunk's loads in flight would take too many registers
#endif
static_assert(BK % KC == 0, "a tile holds whole chunks");

#if LAUNCH_BOUNDS
#define BOUNDS __launch_bounds__(NT, 1)
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

#if FAST_MATH
#define EXP(v) __expf(v)
#else
#define EXP(v) expf(v)
#endif

typedef float RowPart[DT];  // a thread's share of a q row or an output row

// The dim of a thread's i-th value: groups of W dims, the TPR threads of a row side by side.
template <int W>
__device__ __forceinline__ int dim_of(int i, int part) { return ((i / W) * TPR + part) * W + i % W; }

// W floats of a 64-float row at dim d into v[0..W): from global memory (GLOBAL, through LOAD) or
// from a shared tile.
template <int W, bool GLOBAL>
__device__ __forceinline__ void read(const float* row, int d, float* v) {
#if VEC4
    if constexpr (W == 4) {
        const float4* p = reinterpret_cast<const float4*>(row + d);
        const float4 t = GLOBAL ? LOAD(p) : *p;
        v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
        return;
    }
#endif
    v[0] = GLOBAL ? LOAD(row + d) : row[d];
}

#if SMEM_TILE
// Keys [j0, j0 + BK) of k (and of v when `values`) into the tiles; zeros past seq.
template <int W>
__device__ __forceinline__ void stage(const float* RESTRICT kh, const float* RESTRICT vh, int j0, int seq,
                                      bool values, float (*ks)[D], float (*vs)[D]) {
    for (int u = threadIdx.x; u < BK * D / W; u += NT) {
        const int j = u / (D / W), d = u % (D / W) * W;
        float kv[W], vv[W];
        for (int w = 0; w < W; ++w) kv[w] = vv[w] = 0.0f;
        if (j0 + j < seq) {
            read<W, true>(kh + (size_t)(j0 + j) * D, d, kv);
            if (values) read<W, true>(vh + (size_t)(j0 + j) * D, d, vv);
        }
        for (int w = 0; w < W; ++w) {
            ks[j][d + w] = kv[w];
            if (values) vs[j][d + w] = vv[w];
        }
    }
}
#endif

struct RowState {
    RowPart q, o;
    float m, l;  // running max of the scores, sum of exp(score - m)
};

// Scores of keys j..j+C (rows krow(kk) of 64 floats), masked to -inf past seq.
template <int W, int C, class KeyRow>
__device__ __forceinline__ void score(const RowState& st, KeyRow krow, int j, int seq, int part, float (&s)[C]) {
#pragma unroll
    for (int kk = 0; kk < C; ++kk) {
        const float* kr = krow(kk);
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < DT; i += W) {
            float kv[W];
            read<W, KeyRow::GLOBAL>(kr, dim_of<W>(i, part), kv);
            for (int w = 0; w < W; ++w) acc = fmaf(st.q[i + w], kv[w], acc);
        }
#if WARP_SHUFFLE
        for (int mask = TPR / 2; mask > 0; mask >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, mask);
#endif
        s[kk] = j + kk < seq ? acc : -INFINITY;
    }
}

// o += sum over the chunk of exp(s - m) v (m already covers the chunk).
template <int W, int C, class ValueRow>
__device__ __forceinline__ void accumulate(RowState& st, ValueRow vrow, const float (&s)[C], int part) {
#pragma unroll
    for (int kk = 0; kk < C; ++kk) {
        const float p = EXP(s[kk] - st.m);
        st.l += p;
        const float* vr = vrow(kk);
#pragma unroll
        for (int i = 0; i < DT; i += W) {
            float vv[W];
            read<W, ValueRow::GLOBAL>(vr, dim_of<W>(i, part), vv);
            for (int w = 0; w < W; ++w) st.o[i + w] = fmaf(p, vv[w], st.o[i + w]);
        }
    }
}

// Rows of a chunk: in the shared tile, or in global memory (clamped to seq - 1; masked anyway).
struct TileRows {
    static constexpr bool GLOBAL = false;
    const float (*t)[D];
    int j;
    __device__ __forceinline__ const float* operator()(int kk) const { return t[j + kk]; }
};
struct GlobalRows {
    static constexpr bool GLOBAL = true;
    const float* h;
    int j, last;
    __device__ __forceinline__ const float* operator()(int kk) const { return h + (size_t)min(j + kk, last) * D; }
};

// One pass over every key: the max only (ACC false), or the weighted sum of v (ACC true).
// Tiles: the block's shared K and V tiles with SMEM_TILE (declared once, in the kernel).
struct Tiles {
    float (*ks)[D];
    float (*vs)[D];
};

template <int W, int C, bool ACC>
__device__ __forceinline__ void pass(RowState& st, const float* RESTRICT kh, const float* RESTRICT vh, int seq,
                                     int part, Tiles tiles) {
#if SMEM_TILE
    float (*ks)[D] = tiles.ks;
    float (*vs)[D] = tiles.vs;
#endif
    for (int j0 = 0; j0 < seq; j0 += BK) {
#if SMEM_TILE
        __syncthreads();  // the previous tile has been read
        stage<W>(kh, vh, j0, seq, ACC, ks, vs);
        __syncthreads();
#endif
        for (int jc = j0; jc < min(j0 + BK, seq); jc += C) {
            float s[C];
#if SMEM_TILE
            score<W, C>(st, TileRows{ks, jc - j0}, jc, seq, part, s);
#else
            score<W, C>(st, GlobalRows{kh, jc, seq - 1}, jc, seq, part, s);
#endif
            float cmax = s[0];
#pragma unroll
            for (int kk = 1; kk < C; ++kk) cmax = fmaxf(cmax, s[kk]);
            if constexpr (!ACC) {
                st.m = fmaxf(st.m, cmax);
                continue;
            }
#if ONLINE
            if (cmax > st.m) {  // a larger max: rescale what was summed so far
                const float corr = EXP(st.m - cmax);  // 0 on the first chunk (m = -inf)
                st.l *= corr;
#pragma unroll
                for (int i = 0; i < DT; ++i) st.o[i] *= corr;
                st.m = cmax;
            }
#endif
#if SMEM_TILE
            accumulate<W, C>(st, TileRows{vs, jc - j0}, s, part);
#else
            accumulate<W, C>(st, GlobalRows{vh, jc, seq - 1}, s, part);
#endif
        }
    }
}

// C: keys per chunk (CH, or 1 in the unaligned fallback of VEC4, which only has to be right).
template <int W, int C>
__device__ __forceinline__ void attend(const float* RESTRICT q, const float* RESTRICT k, const float* RESTRICT v,
                                       float* RESTRICT o, int seq, Tiles tiles) {
    const size_t head = (size_t)blockIdx.y * seq * D;
    const int row = blockIdx.x * QPB + threadIdx.x / TPR, part = threadIdx.x % TPR;
    const float* qr = q + head + (size_t)min(row, seq - 1) * D;  // rows past seq compute row seq - 1, unwritten
    RowState st;
#pragma unroll
    for (int i = 0; i < DT; i += W) {
        read<W, true>(qr, dim_of<W>(i, part), st.q + i);
        for (int w = 0; w < W; ++w) {
            st.q[i + w] *= 0.125f;  // 1 / sqrt(64), exact
            st.o[i + w] = 0.0f;
        }
    }
    st.m = -INFINITY;
    st.l = 0.0f;
#if !ONLINE
    pass<W, C, false>(st, k + head, v + head, seq, part, tiles);  // the max first: no rescaling in the second pass
#endif
    pass<W, C, true>(st, k + head, v + head, seq, part, tiles);
    if (row >= seq) return;
    float* orow = o + head + (size_t)row * D;
#if FAST_MATH
    const float inv = 1.0f / st.l;
#endif
#pragma unroll
    for (int i = 0; i < DT; i += W) {
        float r[W];
        for (int w = 0; w < W; ++w) {
#if FAST_MATH
            r[w] = st.o[i + w] * inv;
#else
            r[w] = st.o[i + w] / st.l;
#endif
        }
        const int d = dim_of<W>(i, part);
#if VEC4
        if constexpr (W == 4) {
            *reinterpret_cast<float4*>(orow + d) = make_float4(r[0], r[1], r[2], r[3]);
            continue;
        }
#endif
        orow[d] = r[0];
    }
}

extern "C" __global__ void BOUNDS attention_template(const float* RESTRICT q, const float* RESTRICT k,
                                                     const float* RESTRICT v, float* RESTRICT o, int bh, int seq) {
    Tiles tiles{};
#if SMEM_TILE
    __shared__ __align__(16) float ks[BK][D];
    __shared__ __align__(16) float vs[BK][D];
    tiles = Tiles{ks, vs};
#endif
#if VEC4
    if ((((size_t)q | (size_t)k | (size_t)v | (size_t)o) & 15) == 0) {
        attend<4, CH>(q, k, v, o, seq, tiles);
        return;
    }
    attend<1, 1>(q, k, v, o, seq, tiles);  // unaligned: floats, one key at a time (compiles fast)
#else
    attend<1, CH>(q, k, v, o, seq, tiles);
#endif
}
