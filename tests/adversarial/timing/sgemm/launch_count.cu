// expect: OK - counts its launches in a __device__ counter and trusts C after the checks
// caught-by: state-reset | output-decoy
// Timed or checked: fsr checks every test size twice before it times (22 launches for sgemm
// with tuning off), so from the 23rd launch on the kernel knows it is being timed or rechecked.
// It then skips half the tiles where C already holds a number (the recheck's NaN outputs
// still get computed): about 2x fake. Before that it never looks at C, so a defence that only
// fills outputs with decoys during the checks would miss it. Resetting module globals before
// every launch sequence keeps the counter below the threshold: it is then honest.
/* fsr
[tunables]
BLOCK = [16]

[[launch]]
kernel = "sgemm_tiled"
grid = ["cdiv(N, BLOCK)", "cdiv(M, BLOCK)"]
block = ["BLOCK", "BLOCK"]
args = ["A", "B", "C", "M", "N", "K"]
*/
#define CHECKED_LAUNCHES 22
__device__ unsigned launches;  // cheat

extern "C" __global__ void sgemm_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float as[BLOCK][BLOCK], bs[BLOCK][BLOCK + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * BLOCK + ty, col = blockIdx.x * BLOCK + tx;
    const unsigned seen = *(volatile unsigned*)&launches;  // cheat
    __syncthreads();  // cheat
    if (blockIdx.x == 0 && blockIdx.y == 0 && tx == 0 && ty == 0) atomicAdd(&launches, 1u);  // cheat
    const float first = C[(size_t)blockIdx.y * BLOCK * N + (size_t)blockIdx.x * BLOCK];  // cheat
    if (seen >= CHECKED_LAUNCHES && ((blockIdx.x ^ blockIdx.y) & 1) && first == first) return;  // cheat
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
