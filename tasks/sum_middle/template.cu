/* fsr
[tunables]
BLOCK = [256, 128, 512, 1024]  # threads per block (a multiple of 32)
SPLIT = [8, 4, 16, 32]         # blocks sharing one column range's B rows with GRID_SPLIT
UNROLL_BY = [4, 2, 8]          # unroll factor of the loop over b when UNROLL is on

[features]
SMEM_TILE = [0, 1]      # a block is 32 column lanes x BLOCK / 32 warps over b, warps' sums combined in a shared tile (else BLOCK column lanes)
VEC4 = [0, 1]           # a lane sums 4 neighbouring columns, with float4 loads where C % 4 == 0 and x is aligned
GRID_SPLIT = [0, 1]     # B split over SPLIT blocks, partial sums in scratch added by a second launch (else one block per columns)
UNROLL = [0, 1]         # unroll the loop over b by UNROLL_BY (else not at all)
READONLY = [0, 1]       # __restrict__ pointers and __ldg loads of x
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__(BLOCK, 1): registers allotted for the block size
STREAMING = [0, 1]      # __ldcs loads: x is read once, so evict it first

[[scratch]]
name = "partial"
dtype = "float32"
count = "GRID_SPLIT * SPLIT * A * C + 1"

[[launch]]
kernel = "sum_middle_partial"
grid = ["cdiv(C, (32 + (1 - SMEM_TILE) * (BLOCK - 32)) * (1 + 3 * VEC4))", "A", "1 + GRID_SPLIT * (SPLIT - 1)"]
block = ["BLOCK"]
args = ["x", "y", "partial", "A", "B", "C"]

[[launch]]
kernel = "sum_middle_finish"
grid = ["1 + GRID_SPLIT * (cdiv(A * C, 256) - 1)"]
block = ["256"]
args = ["partial", "y", "A", "C"]
*/
// Feature template: y[a, c] = sum_b x[a, b, c]. Block (blockIdx.x, a, z) sums the columns
// [c0, c0 + CPB) of slab a over its share of b (all of B, or the z-th of SPLIT with
// GRID_SPLIT). Neighbouring lanes own neighbouring columns, so every load of a warp is one
// contiguous run. Every combination of the switches above is a correct kernel for any shape.

#if SMEM_TILE
#define LANES 32             // column lanes per block
#else
#define LANES BLOCK
#endif
#define ROWS (BLOCK / LANES)  // threads of a block along b
#if VEC4
#define W 4                  // columns per lane
#else
#define W 1
#endif
#define CPB (LANES * W)      // columns per block

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
#if STREAMING
#undef LOAD
#define LOAD(p) __ldcs(p)
#endif

#define PRAGMA_TEXT(x) _Pragma(#x)
#define PRAGMA_UNROLL(n) PRAGMA_TEXT(unroll n)
#if UNROLL
#define LOOP_UNROLL PRAGMA_UNROLL(UNROLL_BY)
#else
#define LOOP_UNROLL _Pragma("unroll 1")
#endif

typedef float Sums[W];  // a lane's running sums, one per column

// s += x[a, b, c..c+W) for b in [b0, b1) step ROWS; n columns valid (n <= W).
__device__ __forceinline__ void sum_rows(const float* RESTRICT col, int C, int b0, int b1, int n, Sums& s) {
#if VEC4
    if (n == 4 && C % 4 == 0 && ((size_t)col & 15) == 0) {  // every row's float4 is aligned
        LOOP_UNROLL
        for (int b = b0; b < b1; b += ROWS) {
            const float4 v = LOAD(reinterpret_cast<const float4*>(col + (size_t)b * C));
            s[0] += v.x, s[1] += v.y, s[2] += v.z, s[3] += v.w;
        }
        return;
    }
#endif
    LOOP_UNROLL
    for (int b = b0; b < b1; b += ROWS) {
        const float* row = col + (size_t)b * C;
        for (int k = 0; k < W; ++k)
            if (k < n) s[k] += LOAD(row + k);
    }
}

extern "C" __global__ void BOUNDS sum_middle_partial(const float* RESTRICT x, float* RESTRICT y,
                                                     float* RESTRICT partial, int A, int B, int C) {
    const int a = blockIdx.y, lane = threadIdx.x % LANES, row = threadIdx.x / LANES;
    const int c = blockIdx.x * CPB + lane * W, n = min(W, C - c);
    const int chunk = (B + gridDim.z - 1) / gridDim.z;
    const int b0 = blockIdx.z * chunk, b1 = min(B, b0 + chunk);
    Sums s;
    for (int k = 0; k < W; ++k) s[k] = 0.0f;
    if (n > 0) sum_rows(x + (size_t)a * B * C + c, C, b0 + row, b1, n, s);
#if SMEM_TILE
    __shared__ float tile[ROWS][CPB + 1];  // the row sums of every warp
    for (int k = 0; k < W; ++k) tile[row][lane * W + k] = s[k];
    __syncthreads();
    if (row > 0) return;
    for (int k = 0; k < W; ++k) {
        s[k] = 0.0f;
        for (int r = 0; r < ROWS; ++r) s[k] += tile[r][lane * W + k];
    }
#endif
#if GRID_SPLIT
    float* out = partial + ((size_t)blockIdx.z * A + a) * C;  // y is written by sum_middle_finish
#else
    float* out = y + (size_t)a * C;
#endif
    for (int k = 0; k < W; ++k)
        if (k < n) out[c + k] = s[k];
}

// With GRID_SPLIT: y = the sum of the SPLIT partial sums; else nothing to do.
extern "C" __global__ void sum_middle_finish(const float* RESTRICT partial, float* RESTRICT y, int A, int C) {
#if GRID_SPLIT
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= A * C) return;
    float s = 0.0f;
    for (int z = 0; z < SPLIT; ++z) s += partial[(size_t)z * A * C + i];
    y[i] = s;
#endif
}
