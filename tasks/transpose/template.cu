/* fsr
[tunables]
TILE = [32, 64]     # a block moves a TILE x TILE tile
BY = [8, 4, 16, 32] # the block is 32 x BY threads

[features]
SMEM_TILE = [0, 1]      # stage the tile in shared memory: reads and writes both along rows (else write down columns)
BANK_PAD = [0, 1]       # one float of padding per shared row: column reads hit 32 banks (else conflicts)
VEC4 = [0, 1]           # float4 loads of x and stores of y where aligned and inside the matrix (else floats)
READONLY = [0, 1]       # __restrict__ pointers and __ldg loads of x
UNROLL = [0, 1]         # unroll the loops over a thread's units (else not at all)
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__(32 * BY): registers allotted for the block size
STREAMING = [0, 1]      # __stcs stores: y is written once, never read back, so evict it first

[[launch]]
kernel = "transpose_template"
grid = ["cdiv(cols, TILE)", "cdiv(rows, TILE)"]
block = ["32", "BY"]
args = ["x", "y", "rows", "cols"]
*/
// Feature template: y = x^T for a (rows, cols) float32 matrix. A block moves the TILE x TILE
// tile at (r0, c0). Its work is split into units of W floats (W = 4 with VEC4) along the
// contiguous dimension, dealt to the threads round-robin. Every combination of the switches above
// is a correct kernel for any shape and alignment: a float4 is used only where it lies wholly
// inside the matrix and its address is 16-byte aligned, else its floats go one by one.

#define NT (32 * BY)  // threads per block
#if VEC4
#define W 4
#else
#define W 1
#endif
#define UNITS (TILE * TILE / W)
#define PER ((UNITS + NT - 1) / NT)  // units per thread

#if LAUNCH_BOUNDS
#define BOUNDS __launch_bounds__(NT)
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

#if STREAMING
#define STORE(p, v) __stcs(p, v)
#else
#define STORE(p, v) (*(p) = (v))
#endif

#define PRAGMA_TEXT(x) _Pragma(#x)
#if UNROLL
#define LOOP_UNROLL PRAGMA_TEXT(unroll)
#else
#define LOOP_UNROLL PRAGMA_TEXT(unroll 1)
#endif

#if BANK_PAD
#define LD (TILE + 1)
#else
#define LD TILE
#endif

// W floats at p, n of them valid (n <= W); a float4 when all are and p is aligned.
__device__ __forceinline__ void load_w(const float* RESTRICT p, int n, float* v) {
#if VEC4
    if (n == W && ((size_t)p & 15) == 0) {
        const float4 q = LOAD(reinterpret_cast<const float4*>(p));
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
        return;
    }
#endif
    for (int k = 0; k < W; ++k) v[k] = k < n ? LOAD(p + k) : 0.0f;
}

__device__ __forceinline__ void store_w(float* RESTRICT p, int n, const float* v) {
#if VEC4
    if (n == W && ((size_t)p & 15) == 0) {
        STORE(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
        return;
    }
#endif
    for (int k = 0; k < W; ++k)
        if (k < n) STORE(p + k, v[k]);
}

extern "C" __global__ void BOUNDS transpose_template(const float* RESTRICT x, float* RESTRICT y, int rows, int cols) {
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;
    const int t = threadIdx.y * 32 + threadIdx.x;
    float v[W];
#if SMEM_TILE
    __shared__ float tile[TILE][LD];
    LOOP_UNROLL
    for (int l = 0; l < PER; ++l) {  // x rows into the tile: unit (i, j..j+W-1)
        const int u = t + l * NT;
        if (UNITS % NT != 0 && u >= UNITS) break;
        const int i = u / (TILE / W), j = u % (TILE / W) * W;
        if (r0 + i < rows) {
            load_w(x + (size_t)(r0 + i) * cols + c0 + j, min(W, cols - c0 - j), v);
            for (int k = 0; k < W; ++k) tile[i][j + k] = v[k];
        }
    }
    __syncthreads();
    LOOP_UNROLL
    for (int l = 0; l < PER; ++l) {  // tile columns into y rows: unit (j, i..i+W-1)
        const int u = t + l * NT;
        if (UNITS % NT != 0 && u >= UNITS) break;
        const int j = u / (TILE / W), i = u % (TILE / W) * W;
        if (c0 + j < cols) {
            for (int k = 0; k < W; ++k) v[k] = tile[i + k][j];
            store_w(y + (size_t)(c0 + j) * rows + r0 + i, min(W, rows - r0 - i), v);
        }
    }
#else
    LOOP_UNROLL
    for (int l = 0; l < PER; ++l) {  // read along x rows, write down y columns
        const int u = t + l * NT;
        if (UNITS % NT != 0 && u >= UNITS) break;
        const int i = u / (TILE / W), j = u % (TILE / W) * W;
        if (r0 + i < rows) {
            const int n = min(W, cols - c0 - j);
            load_w(x + (size_t)(r0 + i) * cols + c0 + j, n, v);
            for (int k = 0; k < W; ++k)
                if (k < n) STORE(y + (size_t)(c0 + j + k) * rows + r0 + i, v[k]);
        }
    }
#endif
}
