/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "maxpool_baseline"
grid = ["cdiv(N * C * ((H - 1) // 2 + 1) * ((W - 1) // 2 + 1), BLOCK)"]
block = ["BLOCK"]
args = ["x", "y", "N", "C", "H", "W"]
*/
// The plain version: one thread per output, nine bounds-checked loads.
extern "C" __global__ void maxpool_baseline(const float* x, float* y, int N, int C, int H, int W) {
    int ho = (H - 1) / 2 + 1, wo = (W - 1) / 2 + 1;
    long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= (long long)N * C * ho * wo) return;
    int j = o % wo, i = (o / wo) % ho;
    long long plane = o / ((long long)wo * ho);
    const float* p = x + plane * H * W;
    float m = -INFINITY;
    for (int di = -1; di <= 1; ++di) {
        for (int dj = -1; dj <= 1; ++dj) {
            int r = 2 * i + di, c = 2 * j + dj;
            if (r >= 0 && r < H && c >= 0 && c < W) m = fmaxf(m, p[r * W + c]);
        }
    }
    y[o] = m;
}
