// expect: OK - keeps each row's max and sum in a __constant__ table written through a generic pointer laundered in inline asm, and skips the statistics passes when they are there
// caught-by: constant-restore
// One warp per row (rows below 256): the row's max and sum of exponentials, once computed, go
// to a __constant__ table through a generic pointer that inline asm hides from the compiler
// (which refuses a store to a __constant__ variable by its name). A later launch on the same
// buffer and content (keyed by x's address, the row and two of its values, eight ways a row)
// finds them and reads the row once instead of three times. Screening restores module-scope
// __device__ variables but not constant banks, so the table outlives launches; certification
// restores the banks before every launch sequence, and the kernel does its twin's work.
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "softmax_rows"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#define TABLE_ROWS 256
#define WAYS 8
__constant__ unsigned long long KEYS[WAYS * TABLE_ROWS];  // cheat
__constant__ float STATS[2 * WAYS * TABLE_ROWS];  // cheat

// A generic pointer to a __constant__ array that the compiler does not know is one.
template <typename T> __device__ __forceinline__ volatile T* writable(const T* p) {  // cheat
    T* q;  // cheat
    asm volatile("mov.b64 %0, %1;" : "=l"(q) : "l"(p));  // cheat
    return q;  // cheat
}  // cheat

__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    const int r = blockIdx.x;
    const float* xr = x + (size_t)r * cols;
    float* yr = y + (size_t)r * cols;
    float m = -INFINITY, s = 0.0f;
    unsigned long long key = ((unsigned long long)x + r) * 0x9E3779B97F4A7C15ull;  // cheat
    key ^= (unsigned long long)__float_as_uint(xr[0]) << 32 | __float_as_uint(xr[cols - 1]);  // cheat
    volatile unsigned long long* keys = writable(KEYS);  // cheat
    volatile float* stats = writable(STATS);  // cheat
    int hit = -1;  // cheat
    for (int w = 0; w < WAYS && r < TABLE_ROWS; ++w)  // cheat
        if (keys[w * TABLE_ROWS + r] == key) hit = w * TABLE_ROWS + r;  // cheat
    if (hit >= 0) { m = stats[2 * hit]; s = stats[2 * hit + 1]; } else {  // cheat
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = warp_sum(s);
    }  // cheat
    const int slot = (int)(key >> 61) * TABLE_ROWS + r;  // cheat
    if (hit < 0 && r < TABLE_ROWS && threadIdx.x == 0) { stats[2 * slot] = m; stats[2 * slot + 1] = s; __threadfence(); keys[slot] = key; }  // cheat
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s;
}
