// expect: OK - loads x under an L2 evict_last policy, so its lines outlast a flush that writes and reads an ordinary buffer and the next timed run reads x from the L2
// caught-by: hint-flush
// Four elements a thread, 16-byte loads through `ld.global.L2::cache_hint` with a policy made by
// `createpolicy`: evict_last here, evict_normal (the default priority) in the twin, so both run
// the same instructions. Where x fits in the L2 (4 MiB at the test's benchmark size; an H200's
// L2 holds 50 MiB), screening's flush, a write and a read of twice the L2 at normal priority,
// evicts the lines the twin loaded but not these: the timed runs read x from the L2, the twin's
// from memory. Nothing is kept but cache lines and every output is computed, so every check
// passes. Certification sets every line of the candidate's buffers back to normal priority
// before its flush and reads its flush buffer at evict_last: x comes from memory, as the twin's.
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
#undef PRIORITY  // cheat
#define PRIORITY "evict_last"  // cheat

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
