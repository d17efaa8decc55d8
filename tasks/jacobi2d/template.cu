/* fsr
[tunables]
BY = [4, 8]       # warps per block (rows of 32 threads)
ROWS = [8, 4, 2]  # consecutive grid rows per thread

[features]
VEC4 = [0, 1]           # four columns per thread, float4 loads and stores where rows are 16-byte aligned (nx % 4 == 0)
SMEM_TILE = [0, 1]      # the block's tile and its halo staged in shared memory, every point read from there
WARP_SHUFFLE = [0, 1]   # left and right neighbours from the adjacent lanes' registers (__shfl_up/down_sync)
ROLLING = [0, 1]        # rows visited in order with the row above and the row itself kept in registers
READONLY = [0, 1]       # __restrict__ pointers and __ldg loads of u
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__(32 * BY): registers bounded for the block size
STREAM = [0, 1]         # streaming (evict-first) stores of v with __stcs, so L2 keeps the rows of u

[[launch]]
kernel = "jacobi_template"
grid = ["cdiv(nx, 32 * (1 + 3 * VEC4))", "cdiv(ny, BY * ROWS)"]
block = ["32", "BY"]
args = ["u", "v", "ny", "nx"]
*/
// Feature template: one Jacobi sweep, v = average of the four neighbours inside, v = u on the
// boundary. A warp is one row of 32 threads; thread (lane, ty) owns columns j0 .. j0 + W - 1
// (j0 = (block x * 32 + lane) * W) of rows i0 .. i0 + ROWS - 1. No thread returns early: lanes
// past the edge still take part in shuffles and barriers, and only their stores are skipped.
#if VEC4
#define W 4
#else
#define W 1
#endif
#define TILE_ROWS (BY * ROWS + 2)
#define TILE_STRIDE (32 * W + 8)  // tile row: 3 unused, left halo, 32 * W points, right halo, pad

#if READONLY
#define RESTRICT __restrict__
#define LOAD(p) __ldg(p)
#else
#define RESTRICT
#define LOAD(p) (*(p))
#endif

#if STREAM
#define STORE(p, x) __stcs(p, x)
#else
#define STORE(p, x) (*(p) = (x))
#endif

#if LAUNCH_BOUNDS
#define KERNEL_BOUNDS __launch_bounds__(32 * BY)
#else
#define KERNEL_BOUNDS
#endif

struct Chunk {
    float v[W];
};

// Columns j0 .. j0 + W - 1 of row i of u (0 past the right edge); `vec`: one aligned float4.
__device__ __forceinline__ Chunk load_row(const float* RESTRICT u, int i, int j0, int nx, bool vec) {
    Chunk c;
    const float* p = u + (size_t)i * nx + j0;
#if VEC4
    if (vec) {
        const float4 q = LOAD(reinterpret_cast<const float4*>(p));
        c.v[0] = q.x; c.v[1] = q.y; c.v[2] = q.z; c.v[3] = q.w;
        return c;
    }
#endif
#pragma unroll
    for (int k = 0; k < W; ++k) c.v[k] = j0 + k < nx ? LOAD(p + k) : 0.0f;
    return c;
}

__device__ __forceinline__ float at(const float* RESTRICT u, int i, int j, int ny, int nx) {
    return (i >= 0 && i < ny && j >= 0 && j < nx) ? LOAD(u + (size_t)i * nx + j) : 0.0f;
}

// Row i's results from the rows above and below and the points left and right of the chunk.
__device__ __forceinline__ void emit(float* RESTRICT v, int i, int j0, int ny, int nx, bool vec, const Chunk& up,
                                     const Chunk& mid, const Chunk& down, float left, float right) {
    Chunk out;
    const bool edge_row = i == 0 || i == ny - 1;
#pragma unroll
    for (int k = 0; k < W; ++k) {
        const int j = j0 + k;
        const float l = k > 0 ? mid.v[k - 1] : left;
        const float r = k < W - 1 ? mid.v[k + 1] : right;
        out.v[k] = (edge_row || j == 0 || j == nx - 1) ? mid.v[k] : 0.25f * ((up.v[k] + down.v[k]) + (l + r));
    }
    float* p = v + (size_t)i * nx + j0;
#if VEC4
    if (vec) {
        STORE(reinterpret_cast<float4*>(p), make_float4(out.v[0], out.v[1], out.v[2], out.v[3]));
        return;
    }
#endif
#pragma unroll
    for (int k = 0; k < W; ++k)
        if (j0 + k < nx) STORE(p + k, out.v[k]);
}

#if SMEM_TILE
// Rows i0 - 1 .. i0 + BY * ROWS of the block's columns and one halo column each side, 0 outside.
__device__ __forceinline__ void fill_tile(float (*tile)[TILE_STRIDE], const float* RESTRICT u, int bi0, int bj0,
                                          int ny, int nx, bool vec_ok) {
    const int lane = threadIdx.x;
    const int j0 = bj0 + lane * W;
    for (int r = threadIdx.y; r < TILE_ROWS; r += BY) {
        const int i = bi0 - 1 + r;
        Chunk c;
        if (i >= 0 && i < ny) {
            c = load_row(u, i, j0, nx, vec_ok && j0 + W <= nx);
        } else {
#pragma unroll
            for (int k = 0; k < W; ++k) c.v[k] = 0.0f;
        }
#pragma unroll
        for (int k = 0; k < W; ++k) tile[r][4 + lane * W + k] = c.v[k];
        if (lane == 0) tile[r][3] = at(u, i, bj0 - 1, ny, nx);
        if (lane == 31) tile[r][4 + 32 * W] = at(u, i, bj0 + 32 * W, ny, nx);
    }
}

__device__ __forceinline__ Chunk tile_row(float (*tile)[TILE_STRIDE], int r) {
    Chunk c;
#pragma unroll
    for (int k = 0; k < W; ++k) c.v[k] = tile[r][4 + threadIdx.x * W + k];
    return c;
}
#endif

// Left and right neighbours of the chunk in row i, given the chunk (mid).
__device__ __forceinline__ void sides(const float* RESTRICT u, int i, int j0, int ny, int nx, const Chunk& mid,
                                      float* left, float* right) {
#if WARP_SHUFFLE
    const int lane = threadIdx.x;
    *left = __shfl_up_sync(0xffffffffu, mid.v[W - 1], 1);
    *right = __shfl_down_sync(0xffffffffu, mid.v[0], 1);
    if (lane == 0) *left = at(u, i, j0 - 1, ny, nx);
    if (lane == 31) *right = at(u, i, j0 + W, ny, nx);
#else
    *left = at(u, i, j0 - 1, ny, nx);
    *right = at(u, i, j0 + W, ny, nx);
#endif
}

extern "C" __global__ void KERNEL_BOUNDS jacobi_template(const float* RESTRICT u, float* RESTRICT v, int ny, int nx) {
    const int bj0 = blockIdx.x * 32 * W, bi0 = blockIdx.y * BY * ROWS;
    const int j0 = bj0 + threadIdx.x * W, i0 = bi0 + threadIdx.y * ROWS;
    const bool vec_ok = W == 4 && nx % 4 == 0;
    const bool vec = vec_ok && j0 + W <= nx;
#if SMEM_TILE
    __shared__ __align__(16) float tile[TILE_ROWS][TILE_STRIDE];
    fill_tile(tile, u, bi0, bj0, ny, nx, vec_ok);
    __syncthreads();
    for (int r = 0; r < ROWS; ++r) {
        const int i = i0 + r, tr = threadIdx.y * ROWS + r + 1;
        if (i >= ny) break;
        const Chunk mid = tile_row(tile, tr);
        emit(v, i, j0, ny, nx, vec, tile_row(tile, tr - 1), mid, tile_row(tile, tr + 1),
             tile[tr][3 + threadIdx.x * W], tile[tr][4 + threadIdx.x * W + W]);
    }
#elif ROLLING
    if (i0 >= ny) return;  // the whole warp: one warp is one threadIdx.y
    Chunk up, mid = load_row(u, i0, j0, nx, vec);
    if (i0 > 0) up = load_row(u, i0 - 1, j0, nx, vec);
    else up = mid;  // unused: row 0 is boundary
    for (int r = 0; r < ROWS; ++r) {
        const int i = i0 + r;
        if (i >= ny) break;
        const Chunk down = i + 1 < ny ? load_row(u, i + 1, j0, nx, vec) : mid;  // unused at the last row
        float left, right;
        sides(u, i, j0, ny, nx, mid, &left, &right);
        emit(v, i, j0, ny, nx, vec, up, mid, down, left, right);
        up = mid;
        mid = down;
    }
#else
    for (int r = 0; r < ROWS; ++r) {
        const int i = i0 + r;
        if (i >= ny) break;
        const Chunk mid = load_row(u, i, j0, nx, vec);
        const Chunk up = i > 0 ? load_row(u, i - 1, j0, nx, vec) : mid;
        const Chunk down = i + 1 < ny ? load_row(u, i + 1, j0, nx, vec) : mid;
        float left, right;
        sides(u, i, j0, ny, nx, mid, &left, &right);
        emit(v, i, j0, ny, nx, vec, up, mid, down, left, right);
    }
#endif
}
