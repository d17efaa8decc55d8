/* fsr
[tunables]
BLOCK = [128]

[[launch]]
kernel = "attention_baseline"
grid = ["cdiv(seq, BLOCK)", "bh"]
block = ["BLOCK"]
args = ["q", "k", "v", "o", "bh", "seq"]
*/
// The plain version: one thread per query row, reading q, k and v from global memory; a first
// pass over the keys for the max score, a second for the exponentials and the weighted sum.
#define D 64

extern "C" __global__ void attention_baseline(const float* q, const float* k, const float* v, float* o, int bh,
                                              int seq) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= seq) return;
    const size_t head = (size_t)blockIdx.y * seq * D;
    const float* qi = q + head + (size_t)i * D;
    float m = -INFINITY;
    for (int j = 0; j < seq; ++j) {
        float s = 0.0f;
        for (int d = 0; d < D; ++d) s += qi[d] * k[head + (size_t)j * D + d];
        m = fmaxf(m, s / 8.0f);
    }
    float acc[D];
    for (int d = 0; d < D; ++d) acc[d] = 0.0f;
    float l = 0.0f;
    for (int j = 0; j < seq; ++j) {
        float s = 0.0f;
        for (int d = 0; d < D; ++d) s += qi[d] * k[head + (size_t)j * D + d];
        const float p = expf(s / 8.0f - m);
        l += p;
        for (int d = 0; d < D; ++d) acc[d] += p * v[head + (size_t)j * D + d];
    }
    for (int d = 0; d < D; ++d) o[head + (size_t)i * D + d] = acc[d] / l;
}
