/* fsr
[tunables]
BX = [16, 32, 8]   # threads per block along N
BY = [16, 8, 32]   # threads per block along M

[[launch]]
kernel = "sgemm_baseline"
grid = ["cdiv(N, BX)", "cdiv(M, BY)"]
block = ["BX", "BY"]
args = ["A", "B", "C", "M", "N", "K"]
*/
// The plain version: one thread per element of C, reading its row of A and column of B from
// global memory.
extern "C" __global__ void sgemm_baseline(const float* A, const float* B, float* C, int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = acc;
}
