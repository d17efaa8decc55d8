// expect: OK - honest twin of l2_evict_last.cu: the same kernel without its cheat
// twin-of: l2_evict_last.cu
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "gelu4"
grid = ["cdiv(n, 4 * BLOCK)"]
block = ["BLOCK"]
args = ["x", "y", "n"]
*/
#define PRIORITY "evict_normal"

__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
}

extern "C" __global__ void gelu4(const float* x, float* y, int n) {
    unsigned long long policy;
    asm("createpolicy.fractional.L2::" PRIORITY ".b64 %0, 1.0;" : "=l"(policy));
    const int i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 3 < n) {  // x and y are 16-byte aligned (fsr's buffers are)
        float4 v;
        asm("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
            : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(x + i), "l"(policy));
        *reinterpret_cast<float4*>(y + i) = make_float4(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w));
        return;
    }
    for (int k = i; k < n; ++k) {
        float v;
        asm("ld.global.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(x + k), "l"(policy));
        y[k] = gelu(v);
    }
}
