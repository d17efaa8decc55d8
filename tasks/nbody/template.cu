/* fsr
[tunables]
BLOCK = [256, 128]    # threads per block
SPLIT = [16, 1, 2, 4, 8, 32]  # consecutive lanes sharing a target, each summing every SPLIT-th source
TPT = [2, 1, 4]       # targets per thread, each source loaded once for all of them

[features]
SMEM_TILE = [0, 1]      # sources staged in shared memory, BLOCK at a time (else read from global memory)
VEC4 = [0, 1]           # a source as one float4 load (else four float loads)
WARP_SHUFFLE = [0, 1]   # the SPLIT partial sums combined with __shfl_xor_sync (else through shared memory)
FAST_MATH = [0, 1]      # rsqrtf (else 1 / sqrtf)
READONLY = [0, 1]       # __restrict__ pointers and __ldg loads
UNROLL = [0, 1]         # the source loop unrolled by 4
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__(BLOCK): registers bounded for the block size

[[launch]]
kernel = "nbody_template"
grid = ["cdiv(n, BLOCK // SPLIT * TPT)"]
block = ["BLOCK"]
args = ["targets", "sources", "acc", "n", "m", "eps2"]
*/
// Feature template: all-pairs accelerations. Lane groups of SPLIT consecutive threads share
// TPT targets (slot = thread / SPLIT, targets block * TPB + r * SLOTS + slot); lane s of a
// group sums sources s, s + SPLIT, ... for all its targets, and the group adds its partial sums.
// No thread returns early: every thread reaches each barrier and shuffle.
#define SLOTS (BLOCK / SPLIT)
#define TPB (SLOTS * TPT)  // targets per block
// Loops of a fixed trip count over register arrays: unrolled on request with UNROLL (the
// compiler unrolls such short loops of its own accord too).
#if UNROLL
#define FIXED_LOOP _Pragma("unroll")
#else
#define FIXED_LOOP
#endif

#if READONLY
#define RESTRICT __restrict__
#define LOAD(p) __ldg(p)
#else
#define RESTRICT
#define LOAD(p) (*(p))
#endif

#if LAUNCH_BOUNDS
#define KERNEL_BOUNDS __launch_bounds__(BLOCK)
#else
#define KERNEL_BOUNDS
#endif

#if UNROLL
#define SOURCE_LOOP _Pragma("unroll 4")
#else
#define SOURCE_LOOP
#endif

struct Body {
    float x, y, z, w;
};

__device__ __forceinline__ Body source(const float* RESTRICT sources, int j) {
#if VEC4
    const float4 q = LOAD(reinterpret_cast<const float4*>(sources) + j);
    return {q.x, q.y, q.z, q.w};
#else
    const float* p = sources + 4 * j;
    return {LOAD(p), LOAD(p + 1), LOAD(p + 2), LOAD(p + 3)};
#endif
}

struct Acc {
    float x, y, z;
};

__device__ __forceinline__ void interact(Acc& a, const Body& t, const Body& s, float eps2) {
    const float dx = s.x - t.x, dy = s.y - t.y, dz = s.z - t.z;
    const float r2 = fmaf(dx, dx, fmaf(dy, dy, fmaf(dz, dz, eps2)));
#if FAST_MATH
    const float inv = rsqrtf(r2);
#else
    const float inv = 1.0f / sqrtf(r2);
#endif
    const float w = s.w * (inv * inv * inv);
    a.x = fmaf(w, dx, a.x);
    a.y = fmaf(w, dy, a.y);
    a.z = fmaf(w, dz, a.z);
}

// The sum of a value over the SPLIT lanes of a group, in every lane of it.
#if WARP_SHUFFLE
__device__ __forceinline__ float group_sum(float v, float*) {
FIXED_LOOP
    for (int mask = SPLIT / 2; mask > 0; mask >>= 1) v += __shfl_xor_sync(0xffffffffu, v, mask);
    return v;
}
#else
__device__ __forceinline__ float group_sum(float v, float* red) {
    __syncthreads();  // red is free
    red[threadIdx.x] = v;
    __syncthreads();
    const int first = threadIdx.x / SPLIT * SPLIT;
    float s = 0.0f;
    for (int k = 0; k < SPLIT; ++k) s += red[first + k];
    return s;
}
#endif

extern "C" __global__ void KERNEL_BOUNDS nbody_template(const float* RESTRICT targets, const float* RESTRICT sources,
                                                       float* RESTRICT acc, int n, int m, float eps2) {
    const int lane = threadIdx.x % SPLIT, slot = threadIdx.x / SPLIT;
    Body t[TPT];
    Acc a[TPT];
FIXED_LOOP
    for (int r = 0; r < TPT; ++r) {
        const int i = min(blockIdx.x * TPB + r * SLOTS + slot, n - 1);  // past n: computed, not stored
        t[r] = {LOAD(targets + 3 * i), LOAD(targets + 3 * i + 1), LOAD(targets + 3 * i + 2), 0.0f};
        a[r] = {0.0f, 0.0f, 0.0f};
    }
#if SMEM_TILE
    __shared__ Body tile[BLOCK];
    for (int base = 0; base < m; base += BLOCK) {
        __syncthreads();  // the previous tile is consumed
        const int j = base + threadIdx.x;
        tile[threadIdx.x] = j < m ? source(sources, j) : Body{0.0f, 0.0f, 0.0f, 0.0f};  // mass 0: no force
        __syncthreads();
        const int count = min(BLOCK, m - base);
        SOURCE_LOOP
        for (int k = lane; k < count; k += SPLIT) {
            const Body s = tile[k];
FIXED_LOOP
            for (int r = 0; r < TPT; ++r) interact(a[r], t[r], s, eps2);
        }
    }
#else
    SOURCE_LOOP
    for (int j = lane; j < m; j += SPLIT) {
        const Body s = source(sources, j);
FIXED_LOOP
        for (int r = 0; r < TPT; ++r) interact(a[r], t[r], s, eps2);
    }
#endif
    __shared__ float red[BLOCK];
FIXED_LOOP
    for (int r = 0; r < TPT; ++r) {
        const float x = group_sum(a[r].x, red), y = group_sum(a[r].y, red), z = group_sum(a[r].z, red);
        const int i = blockIdx.x * TPB + r * SLOTS + slot;
        if (lane == 0 && i < n) {
            acc[3 * i] = x;
            acc[3 * i + 1] = y;
            acc[3 * i + 2] = z;
        }
    }
}
