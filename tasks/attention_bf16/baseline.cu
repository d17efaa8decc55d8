/* fsr
[tunables]
WARPS = [4, 8, 2]  # query rows (one warp each) per block

[[launch]]
kernel = "attention_bf16_baseline"
grid = ["cdiv(seq, WARPS)", "bh"]
block = ["32 * WARPS"]
args = ["q", "k", "v", "o", "bh", "seq"]
*/
// The plain version: one warp per query row, on the CUDA cores (no tensor cores). Lane l holds
// dims 4l..4l+3 of its q row and of the output; for each key in turn the warp sums the dot product
// by shuffles, then updates the running max, the sum of the weights and the weighted sum of v
// (online softmax, float32 throughout); o is rounded once to bfloat16 at the end.
#include <cuda_bf16.h>

#define D 128

extern "C" __global__ void attention_bf16_baseline(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                   const __nv_bfloat16* v, __nv_bfloat16* o, int bh, int seq) {
    const int lane = threadIdx.x % 32, row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= seq) return;  // the whole warp: the shuffles below have every lane
    const size_t head = (size_t)blockIdx.y * seq * D;
    const float scale = 0.08838834764831845f;  // 1 / sqrt(128)
    float qd[4], acc[4];
    for (int d = 0; d < 4; ++d) {
        qd[d] = __bfloat162float(q[head + (size_t)row * D + 4 * lane + d]) * scale;
        acc[d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j < seq; ++j) {
        const __nv_bfloat16* kj = k + head + (size_t)j * D + 4 * lane;
        float s = 0.0f;
        for (int d = 0; d < 4; ++d) s = fmaf(qd[d], __bfloat162float(kj[d]), s);
        for (int mask = 16; mask > 0; mask >>= 1) s += __shfl_xor_sync(0xffffffffu, s, mask);
        const float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);  // corr 0 at the first key
        const __nv_bfloat16* vj = v + head + (size_t)j * D + 4 * lane;
        for (int d = 0; d < 4; ++d) acc[d] = fmaf(p, __bfloat162float(vj[d]), acc[d] * corr);
        l = l * corr + p;
        m = mn;
    }
    for (int d = 0; d < 4; ++d) o[head + (size_t)row * D + 4 * lane + d] = __float2bfloat16_rn(acc[d] / l);
}
