/* fsr
[tunables]
BLOCK = [256, 128, 512, 1024]  # threads per block
ITEMS = [4, 2, 8]              # units (floats, or float4s with VEC4) a thread holds at once with REG_BLOCK
GRID_MAX = [1056, 528, 2112, 4224]  # blocks of the grid-stride loop with COALESCE (multiples of 132 SMs)

[features]
VEC4 = [0, 1]           # float4 loads and stores where x and y are 16-byte aligned (else floats)
REG_BLOCK = [0, 1]      # each thread loads ITEMS units into registers before computing any (else one)
COALESCE = [0, 1]       # grid-stride: at most GRID_MAX blocks, each loops over the chunks (else one chunk a block)
FAST_MATH = [0, 1]      # x / (1 + __expf(-2u)) (else 0.5 x (1 + tanhf(u)))
READONLY = [0, 1]       # __restrict__ pointers and __ldg loads of x
LAUNCH_BOUNDS = [0, 1]  # __launch_bounds__(BLOCK): registers allotted for the block size
STREAMING = [0, 1]      # __stcs stores: y is written once, never read back, so evict it first

[[launch]]
kernel = "gelu_template"
grid = ["COALESCE * min(GRID_MAX, cdiv(n, BLOCK * (1 + REG_BLOCK * (ITEMS - 1)) * (1 + 3 * VEC4))) + (1 - COALESCE) * cdiv(n, BLOCK * (1 + REG_BLOCK * (ITEMS - 1)) * (1 + 3 * VEC4))"]
block = ["BLOCK"]
args = ["x", "y", "n"]
*/
// Feature template: GELU (tanh approximation), y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Every combination of the switches above is a correct kernel for any n and any alignment: the
// float4 path runs only where both pointers are 16-byte aligned, the last n % 4 floats go one by one.

#if REG_BLOCK
#define PER ITEMS  // units per thread per step
#else
#define PER 1
#endif
#define STEP_UNITS (BLOCK * PER)  // units a block covers per step

#if LAUNCH_BOUNDS
#define BOUNDS __launch_bounds__(BLOCK)
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

__device__ __forceinline__ float gelu(float v) {
    const float u = 0.7978845608f * fmaf(0.044715f * v, v * v, v);
#if FAST_MATH
    return v / (1.0f + __expf(-2.0f * u));  // 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)); no cancellation
#else
    return 0.5f * v * (1.0f + tanhf(u));
#endif
}

__device__ __forceinline__ float apply(float v) { return gelu(v); }
#if VEC4
__device__ __forceinline__ float4 apply(float4 v) { return make_float4(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w)); }
#endif

// One step of a block over units [base, base + STEP_UNITS) of T (float or float4).
template <class T>
__device__ __forceinline__ void step(const T* RESTRICT x, T* RESTRICT y, int units, int base) {
#if REG_BLOCK
    T v[PER];
    for (int k = 0; k < PER; ++k) {
        const int u = base + k * BLOCK + (int)threadIdx.x;
        if (u < units) v[k] = LOAD(x + u);
    }
    for (int k = 0; k < PER; ++k) {
        const int u = base + k * BLOCK + (int)threadIdx.x;
        if (u < units) STORE(y + u, apply(v[k]));
    }
#else
    const int u = base + (int)threadIdx.x;
    if (u < units) STORE(y + u, apply(LOAD(x + u)));
#endif
}

// Every unit, in steps of the whole grid: one step when the grid covers n (COALESCE off and the
// float4 path), several when it is capped (COALESCE) or when unaligned pointers fall back to floats.
template <class T>
__device__ __forceinline__ void sweep(const T* RESTRICT x, T* RESTRICT y, int units) {
    const int span = gridDim.x * STEP_UNITS;
    for (int base = blockIdx.x * STEP_UNITS; base < units; base += span) step(x, y, units, base);
}

extern "C" __global__ void BOUNDS gelu_template(const float* RESTRICT x, float* RESTRICT y, int n) {
#if VEC4
    if ((((size_t)x | (size_t)y) & 15) == 0) {
        sweep(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), n / 4);
        const int tail = n / 4 * 4 + (int)threadIdx.x;  // the last n % 4 floats
        if (blockIdx.x == 0 && tail < n) STORE(y + tail, gelu(LOAD(x + tail)));
        return;
    }
#endif
    sweep(x, y, n);
}
