/* fsr
[tunables]
BY = [4, 8, 2]    # warps per block, each a row of 32 threads
ROWS = [2, 1, 4]  # consecutive output rows per thread

[features]
VEC4 = [0, 1]           # two outputs per thread, their input columns as one float4 where rows are 16-byte aligned (W % 4 == 0)
WARP_SHUFFLE = [0, 1]   # each window's leftmost column from the next lane down (__shfl_up_sync) instead of a load
ROW_REUSE = [0, 1]      # input rows visited once, in order: the row shared by two output rows is read once
READONLY = [0, 1]       # __restrict__ pointers and __ldg loads of x
STREAM = [0, 1]         # streaming (evict-first) loads and stores: __ldcs / __stcs
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__(32 * BY): registers bounded for the block size
FLAT = [0, 1]           # 4 outputs a thread, threads numbered over (plane, row group, column group): no idle lanes, all input rows loaded before use

[[launch]]
kernel = "maxpool_template"
grid = ["FLAT * cdiv(N * C * cdiv((H - 1) // 2 + 1, ROWS) * cdiv((W - 1) // 2 + 1, 4), 32 * BY) + (1 - FLAT) * cdiv((W - 1) // 2 + 1, 32 * (1 + VEC4))", "FLAT + (1 - FLAT) * cdiv((H - 1) // 2 + 1, BY * ROWS)", "FLAT + (1 - FLAT) * N * C"]
block = ["32", "BY"]
args = ["x", "y", "N", "C", "H", "W"]
*/
// Feature template: 3x3 max pooling, stride 2, padding 1, NCHW. Thread (lane, ty) of block
// (bx, by, plane) owns OPT output columns (OPT = 2 with VEC4) from j0 = (bx * 32 + lane) * OPT
// and ROWS output rows from i0 = (by * BY + ty) * ROWS. A window's row max over input columns
// 2j-1 .. 2j+1 is taken per input row ("row max"); an output is the max of three row maxes.
// No thread returns early (lanes past the edge take part in shuffles; only stores are skipped).
// With FLAT the block is 32 * BY threads in one line over (plane, row group, column group), each
// thread 4 outputs (input columns 8 cg - 1 .. 8 cg + 7) of ROWS output rows (see maxpool_flat).
#if VEC4
#define OPT 2
#else
#define OPT 1
#endif
#define IN_COLS (2 * OPT)  // input columns 2 * j0 .. 2 * j0 + IN_COLS - 1 are this thread's own

#if READONLY
#define RESTRICT __restrict__
#define LOAD_RO(p) __ldg(p)
#else
#define RESTRICT
#define LOAD_RO(p) (*(p))
#endif
#if STREAM
#define LOAD(p) __ldcs(p)
#define STORE(p, v) __stcs(p, v)
#else
#define LOAD(p) LOAD_RO(p)
#define STORE(p, v) (*(p) = (v))
#endif

#if LAUNCH_BOUNDS
#define KERNEL_BOUNDS __launch_bounds__(32 * BY)
#else
#define KERNEL_BOUNDS
#endif

struct RowMax {
    float m[OPT];
};

// Row maxes of input row r for this thread's OPT outputs (-inf for a row outside the image).
__device__ __forceinline__ RowMax row_max(const float* RESTRICT plane, int r, int H, int W, int c0, bool vec) {
    RowMax out;
    float own[IN_COLS];  // columns c0 .. c0 + IN_COLS - 1
    const bool inside = r >= 0 && r < H;
    const float* p = plane + (size_t)(inside ? r : 0) * W;
#if VEC4
    if (vec) {
        const float4 q = LOAD(reinterpret_cast<const float4*>(p + c0));
        own[0] = q.x; own[1] = q.y; own[2] = q.z; own[3] = q.w;
    } else
#endif
    {
#pragma unroll
        for (int k = 0; k < IN_COLS; ++k) own[k] = c0 + k < W ? LOAD(p + c0 + k) : -INFINITY;
    }
#if WARP_SHUFFLE
    float left = __shfl_up_sync(0xffffffffu, own[IN_COLS - 1], 1);
    if (threadIdx.x == 0) left = c0 > 0 ? LOAD(p + c0 - 1) : -INFINITY;
#else
    const float left = c0 > 0 ? LOAD(p + c0 - 1) : -INFINITY;
#endif
#pragma unroll
    for (int o = 0; o < OPT; ++o) {
        const float l = o > 0 ? own[2 * o - 1] : left;
        out.m[o] = inside ? fmaxf(fmaxf(l, own[2 * o]), own[2 * o + 1]) : -INFINITY;
    }
    return out;
}

__device__ __forceinline__ void put(float* RESTRICT out_row, int j0, int wo, const RowMax& a, const RowMax& b,
                                    const RowMax& c) {
#pragma unroll
    for (int o = 0; o < OPT; ++o)
        if (j0 + o < wo) STORE(out_row + j0 + o, fmaxf(fmaxf(a.m[o], b.m[o]), c.m[o]));
}

#if FLAT
struct Quad {  // four outputs' maxima, in registers
    float x, y, z, w;
};

// Input row r's maxes over the windows of outputs j0 .. j0 + 3 (input columns c0 - 1 .. c0 + 7).
// The left column comes from the lane below when that lane holds the same row group (it loaded
// column c0 - 1 as its last one); lane 0 and column group 0 load it (or take the padding).
__device__ __forceinline__ Quad flat_row_max(const float* RESTRICT p, bool inside, int W, int c0, bool vec,
                                             bool left_from_lane) {
    float own[8];
#if VEC4
    if (vec) {
        const float4 a = LOAD(reinterpret_cast<const float4*>(p + c0));
        const float4 b = LOAD(reinterpret_cast<const float4*>(p + c0) + 1);
        own[0] = a.x; own[1] = a.y; own[2] = a.z; own[3] = a.w;
        own[4] = b.x; own[5] = b.y; own[6] = b.z; own[7] = b.w;
    } else
#endif
    {
#pragma unroll
        for (int k = 0; k < 8; ++k) own[k] = c0 + k < W ? LOAD(p + c0 + k) : -INFINITY;
    }
#if WARP_SHUFFLE
    float left = __shfl_up_sync(0xffffffffu, own[7], 1);
    if (!left_from_lane) left = c0 > 0 ? LOAD(p + c0 - 1) : -INFINITY;
#else
    const float left = c0 > 0 ? LOAD(p + c0 - 1) : -INFINITY;
#endif
    if (!inside) return Quad{-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    return Quad{fmaxf(fmaxf(left, own[0]), own[1]), fmaxf(fmaxf(own[1], own[2]), own[3]),
                fmaxf(fmaxf(own[3], own[4]), own[5]), fmaxf(fmaxf(own[5], own[6]), own[7])};
}

__device__ __forceinline__ Quad max4(Quad a, Quad b) {
    return Quad{fmaxf(a.x, b.x), fmaxf(a.y, b.y), fmaxf(a.z, b.z), fmaxf(a.w, b.w)};
}

// Thread g: column group cg = g % groups (outputs 4 cg .. 4 cg + 3), row group g / groups (output
// rows i0 .. i0 + ROWS - 1 of one plane). Every input row 2 i0 - 1 .. 2 i0 + 2 ROWS - 1 is loaded
// (clamped inside the image) before any is used; threads past the end load valid addresses and
// store nothing, so every lane reaches the shuffles.
__device__ __forceinline__ void maxpool_flat(const float* RESTRICT x, float* RESTRICT y, int planes, int H, int W) {
    const int ho = (H - 1) / 2 + 1, wo = (W - 1) / 2 + 1, groups = (wo + 3) / 4, row_groups = (ho + ROWS - 1) / ROWS;
    const long long g = (long long)blockIdx.x * (32 * BY) + threadIdx.y * 32 + threadIdx.x;
    const long long rg_all = g / groups;  // (plane, row group) in one number
    const int cg = (int)(g - rg_all * groups);
    const long long plane_raw = rg_all / row_groups;
    const bool live = plane_raw < planes;
    const int plane_id = live ? (int)plane_raw : planes - 1;  // idle threads read the last plane
    const int i0 = (int)(rg_all - plane_raw * row_groups) * ROWS;
    const int j0 = 4 * cg, c0 = 2 * j0;
    const bool vec = W % 4 == 0 && c0 + 8 <= W;
    const bool left_from_lane = threadIdx.x > 0 && cg > 0;  // a warp is one threadIdx.y
    const float* plane = x + (size_t)plane_id * H * W;
    Quad m[2 * ROWS + 1];
#pragma unroll
    for (int k = 0; k < 2 * ROWS + 1; ++k) {
        const int r = 2 * i0 - 1 + k;
        const bool inside = r >= 0 && r < H;
        m[k] = flat_row_max(plane + (size_t)(inside ? r : 0) * W, inside, W, c0, vec, left_from_lane);
    }
    if (!live) return;
    float* out = y + (size_t)plane_id * ho * wo;
    const bool vec_out = wo % 4 == 0;  // then j0 + 4 <= wo and the row start is 16-byte aligned
#pragma unroll
    for (int k = 0; k < ROWS; ++k) {
        const int i = i0 + k;
        if (i >= ho) break;
        const Quad v = max4(max4(m[2 * k], m[2 * k + 1]), m[2 * k + 2]);
        float* o = out + (size_t)i * wo + j0;
#if VEC4
        if (vec_out) {
            STORE(reinterpret_cast<float4*>(o), make_float4(v.x, v.y, v.z, v.w));
            continue;
        }
#endif
        if (j0 < wo) STORE(o, v.x);
        if (j0 + 1 < wo) STORE(o + 1, v.y);
        if (j0 + 2 < wo) STORE(o + 2, v.z);
        if (j0 + 3 < wo) STORE(o + 3, v.w);
    }
}
#endif

extern "C" __global__ void KERNEL_BOUNDS maxpool_template(const float* RESTRICT x, float* RESTRICT y, int N, int C,
                                                         int H, int W) {
#if FLAT
    maxpool_flat(x, y, N * C, H, W);
    return;
#endif
    const int ho = (H - 1) / 2 + 1, wo = (W - 1) / 2 + 1;
    const int j0 = (blockIdx.x * 32 + threadIdx.x) * OPT, i0 = (blockIdx.y * BY + threadIdx.y) * ROWS;
    const int c0 = 2 * j0;
    const float* plane = x + (size_t)blockIdx.z * H * W;
    float* out = y + (size_t)blockIdx.z * ho * wo;
    const bool vec = OPT == 2 && W % 4 == 0 && c0 + 4 <= W;
    if (i0 >= ho) return;  // the whole warp: one warp is one threadIdx.y
#if ROW_REUSE
    RowMax above = row_max(plane, 2 * i0 - 1, H, W, c0, vec);
    for (int k = 0; k < ROWS; ++k) {
        const int i = i0 + k;
        if (i >= ho) break;
        const RowMax mid = row_max(plane, 2 * i, H, W, c0, vec);
        const RowMax below = row_max(plane, 2 * i + 1, H, W, c0, vec);
        put(out + (size_t)i * wo, j0, wo, above, mid, below);
        above = below;
    }
#else
    for (int k = 0; k < ROWS; ++k) {
        const int i = i0 + k;
        if (i >= ho) break;
        put(out + (size_t)i * wo, j0, wo, row_max(plane, 2 * i - 1, H, W, c0, vec), row_max(plane, 2 * i, H, W, c0, vec),
            row_max(plane, 2 * i + 1, H, W, c0, vec));
    }
#endif
}
