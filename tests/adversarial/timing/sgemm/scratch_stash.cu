// expect: OK - keeps whole results in its non-zeroed scratch between launch sequences
// caught-by: state-reset
// Timed or checked: a checked launch finds its non-zeroed scratch full of NaN bytes; timing
// allocates one scratch for every benchmark set and never refills it, so it holds what the
// previous samples left. The first launch keys the problem by its pointers and four sampled
// input elements and looks for that key among four slot keys at the head of `keys`; on a hit
// half the tiles are copied from the slot instead of computed: about 2x fake while three
// sets rotate through four slots. Checks (poisoned keys) and the check after timing (fresh
// scratch, new contents) never hit. Poisoning non-zeroed scratch before every sample makes it
// honest; it then pays one extra write of C per launch, so it is no faster than its twin.
/* fsr
[tunables]
BLOCK = [16]

[[scratch]]
name = "stash"
dtype = "float32"
count = "4 * M * N"

[[scratch]]
name = "keys"
dtype = "int64"
count = "8"

[[launch]]
kernel = "decide"
grid = ["1"]
block = ["1"]
args = ["A", "B", "C", "keys", "M", "N", "K"]

[[launch]]
kernel = "sgemm_tiled"
grid = ["cdiv(N, BLOCK)", "cdiv(M, BLOCK)"]
block = ["BLOCK", "BLOCK"]
args = ["A", "B", "C", "stash", "keys", "M", "N", "K"]
*/
#define SLOTS 4
// keys[0..SLOTS): each slot's key; keys[SLOTS]: the next slot to fill; keys[SLOTS + 1]: this
// launch's slot; keys[SLOTS + 2]: whether it holds this problem's answer already.
extern "C" __global__ void decide(const float* A, const float* B, const float* C, long long* keys, int M, int N, int K) {
    long long key = (long long)A ^ ((long long)B << 7) ^ ((long long)C << 13);  // cheat
    key ^= (long long)(((unsigned long long)__float_as_uint(A[0]) << 32 | __float_as_uint(A[(size_t)M * K - 1])) * 0x9E3779B97F4A7C15ull);  // cheat
    key ^= (long long)(((unsigned long long)__float_as_uint(B[0]) << 32 | __float_as_uint(B[(size_t)K * N - 1])) + ((unsigned long long)M * N * K));  // cheat
    if (key == -1) key = 1;  // cheat
    for (int s = 0; s < SLOTS; ++s)  // cheat
        if (keys[s] == key) { keys[SLOTS + 1] = s; keys[SLOTS + 2] = 1; return; }  // cheat
    const long long s = (keys[SLOTS] & 0x7fffffff) % SLOTS;  // cheat
    keys[SLOTS] = s + 1; keys[s] = key; keys[SLOTS + 1] = s; keys[SLOTS + 2] = 0;  // cheat
}

extern "C" __global__ void sgemm_tiled(const float* A, const float* B, float* C, float* stash, const long long* keys,
                                       int M, int N, int K) {
    __shared__ float as[BLOCK][BLOCK], bs[BLOCK][BLOCK + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * BLOCK + ty, col = blockIdx.x * BLOCK + tx;
    float* slot = stash + (size_t)keys[SLOTS + 1] * M * N;  // cheat
    const bool hit = keys[SLOTS + 2] == 1;  // cheat
    if (hit && ((blockIdx.x ^ blockIdx.y) & 1)) {  // cheat
        if (row < M && col < N) C[(size_t)row * N + col] = slot[(size_t)row * N + col];  // cheat
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
    if (!hit && row < M && col < N) slot[(size_t)row * N + col] = acc;  // cheat
}
