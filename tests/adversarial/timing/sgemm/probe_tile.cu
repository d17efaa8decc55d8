// expect: WRONG - recomputes one element of half the tiles and keeps the tile when C holds it
// caught-by: output-decoy | state-reset
// Timed or checked: as skip_filled, but sturdier against a check that fills outputs with
// numbers: the first warp recomputes the tile's corner element (a K-long dot product, split
// over 32 lanes) and the block keeps the tile if C already holds that value. A checked launch
// (NaN in C) never matches and computes in full; a timed sample on an input set seen before
// keeps half the tiles: about 2x fake. Only outputs that are right at the probe but wrong
// elsewhere (a decoy) expose it; NaN before every sample makes it honest.
/* fsr
[tunables]
BLOCK = [16]

[[launch]]
kernel = "sgemm_tiled"
grid = ["cdiv(N, BLOCK)", "cdiv(M, BLOCK)"]
block = ["BLOCK", "BLOCK"]
args = ["A", "B", "C", "M", "N", "K"]
*/
extern "C" __global__ void sgemm_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float as[BLOCK][BLOCK], bs[BLOCK][BLOCK + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * BLOCK + ty, col = blockIdx.x * BLOCK + tx;
    __shared__ int keep;  // cheat
    const int lane = ty * BLOCK + tx, pr = blockIdx.y * BLOCK, pc = blockIdx.x * BLOCK;  // cheat
    if (lane < 32) {  // cheat
        float p = 0.0f;  // cheat
        for (int k = lane; k < K; k += 32) p += A[(size_t)pr * K + k] * B[(size_t)k * N + pc];  // cheat
        for (int o = 16; o > 0; o >>= 1) p += __shfl_xor_sync(0xffffffffu, p, o);  // cheat
        const float held = C[(size_t)pr * N + pc];  // cheat
        if (lane == 0) keep = ((blockIdx.x ^ blockIdx.y) & 1) && fabsf(held - p) <= 1e-4f * (1.0f + fabsf(p));  // cheat
    }  // cheat
    __syncthreads();  // cheat
    if (keep) return;  // cheat
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BLOCK) {
        as[ty][tx] = row < M && k0 + tx < K ? A[(size_t)row * K + k0 + tx] : 0.0f;
        bs[ty][tx] = k0 + ty < K && col < N ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < BLOCK; ++k) acc += as[ty][k] * bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
}
