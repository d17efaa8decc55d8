// expect: OK - honest twin of skip_filled.cu: the same kernel without its cheat
// twin-of: skip_filled.cu
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
