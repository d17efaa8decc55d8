// expect: REJECTED - keeps whole results in a 256 MiB module-scope __device__ table between launches
// caught-by: module-global-bound | state-reset
// Timed or checked: neither is told apart; the kernel simply remembers. A one-thread launch
// keys the problem by its pointers and four sampled input elements, and picks the table slot
// that holds that key (or the next slot, round robin, to fill). On a hit half the tiles are
// copied from the table instead of computed: about 2x fake while the benchmark sets rotate
// (three sets, four slots). A check never hits: its inputs are fresh, and new contents under
// the same buffers (the check after timing) give a new key. The table persists because the
// module is loaded once per evaluation; its size is what a bound on module globals sees.
/* fsr
[tunables]
BLOCK = [16]

[[launch]]
kernel = "decide"
grid = ["1"]
block = ["1"]
args = ["A", "B", "C", "M", "N", "K"]

[[launch]]
kernel = "sgemm_tiled"
grid = ["cdiv(N, BLOCK)", "cdiv(M, BLOCK)"]
block = ["BLOCK", "BLOCK"]
args = ["A", "B", "C", "M", "N", "K"]
*/
#define SLOTS 4
#define CAP (1 << 24)
__device__ float stash[SLOTS][CAP];  // cheat
__device__ unsigned long long stash_key[SLOTS];  // cheat
__device__ unsigned next_slot;  // cheat
__device__ int pick[2];  // cheat

extern "C" __global__ void decide(const float* A, const float* B, const float* C, int M, int N, int K) {
    unsigned long long key = (unsigned long long)A ^ ((unsigned long long)B << 7) ^ ((unsigned long long)C << 13);  // cheat
    key ^= ((unsigned long long)__float_as_uint(A[0]) << 32 | __float_as_uint(A[(size_t)M * K - 1])) * 0x9E3779B97F4A7C15ull;  // cheat
    key ^= ((unsigned long long)__float_as_uint(B[0]) << 32 | __float_as_uint(B[(size_t)K * N - 1])) + ((unsigned long long)M * N * K);  // cheat
    pick[0] = -1;  // cheat
    if ((size_t)M * N > CAP) return;  // cheat
    for (int s = 0; s < SLOTS; ++s)  // cheat
        if (stash_key[s] == key) { pick[0] = s; pick[1] = 1; return; }  // cheat
    const int s = next_slot++ % SLOTS;  // cheat
    stash_key[s] = key; pick[0] = s; pick[1] = 0;  // cheat
}

extern "C" __global__ void sgemm_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float as[BLOCK][BLOCK], bs[BLOCK][BLOCK + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * BLOCK + ty, col = blockIdx.x * BLOCK + tx;
    const int slot = pick[0], hit = pick[1];  // cheat
    if (slot >= 0 && hit && ((blockIdx.x ^ blockIdx.y) & 1)) {  // cheat
        if (row < M && col < N) C[(size_t)row * N + col] = stash[slot][(size_t)row * N + col];  // cheat
        return;  // cheat
    }  // cheat
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BLOCK) {
        as[ty][tx] = row < M && k0 + tx < K ? A[(size_t)row * K + k0 + tx] : 0.0f;
        bs[ty][tx] = k0 + ty < K && col < N ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < BLOCK; ++k) acc += as[ty][k] * bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
    if (slot >= 0 && !hit && row < M && col < N) stash[slot][(size_t)row * N + col] = acc;  // cheat
}
