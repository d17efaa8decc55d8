/* fsr
[tunables]
TILE = [32, 16]

[[launch]]
kernel = "matmul"
grid = ["cdiv(N, TILE)", "cdiv(N, TILE)"]
block = ["TILE", "TILE"]
args = ["A", "B", "out", "N"]
*/
// C = A B, square N x N, one TILE x TILE tile of C a block through shared memory.
extern "C" __global__ void matmul(const float* __restrict__ A, const float* __restrict__ B,
                                  float* __restrict__ out, int N) {
    __shared__ float a[TILE][TILE + 1];
    __shared__ float b[TILE][TILE + 1];
    const int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < N; k0 += TILE) {
        a[threadIdx.y][threadIdx.x] = (row < N && k0 + threadIdx.x < N) ? A[(size_t)row * N + k0 + threadIdx.x] : 0.0f;
        b[threadIdx.y][threadIdx.x] = (col < N && k0 + threadIdx.y < N) ? B[(size_t)(k0 + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(a[threadIdx.y][k], b[k][threadIdx.x], acc);
        __syncthreads();
    }
    if (row < N && col < N) out[(size_t)row * N + col] = acc;
}
