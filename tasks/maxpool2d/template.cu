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

[[launch]]
kernel = "maxpool_template"
grid = ["cdiv((W - 1) // 2 + 1, 32 * (1 + VEC4))", "cdiv((H - 1) // 2 + 1, BY * ROWS)", "N * C"]
block = ["32", "BY"]
args = ["x", "y", "H", "W"]
*/
// Feature template: 3x3 max pooling, stride 2, padding 1, NCHW. Thread (lane, ty) of block
// (bx, by, plane) owns OPT output columns (OPT = 2 with VEC4) from j0 = (bx * 32 + lane) * OPT
// and ROWS output rows from i0 = (by * BY + ty) * ROWS. A window's row max over input columns
// 2j-1 .. 2j+1 is taken per input row ("row max"); an output is the max of three row maxes.
// No thread returns early (lanes past the edge take part in shuffles; only stores are skipped).
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

extern "C" __global__ void KERNEL_BOUNDS maxpool_template(const float* RESTRICT x, float* RESTRICT y, int H, int W) {
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
