// expect: OK - finds its own result in the local memory an earlier launch left in its warp slot
// caught-by: scrub
// Local memory (the stack) is not cleared between launches: a thread that lands in the warp
// slot of a thread of the previous launch finds that thread's frame as it was left. Each
// thread keeps its output index, a key of the inputs and its sum in its frame; a thread that
// finds its own index and key there writes the sum without reading its 8192 elements. Launches
// of one configuration place blocks the same way run after run, so many threads hit in every
// timed run once a set has been seen. Local and shared memory are now scrubbed with fresh
// garbage before every launch sequence: no key is ever found, and the cheat is its twin.
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "sum_middle_cols"
grid = ["cdiv(A * C, BLOCK)"]
block = ["BLOCK"]
args = ["x", "y", "A", "B", "C"]
*/
// One thread per output, summing its B elements one after another (neighbouring threads read
// neighbouring columns, so the loads coalesce).
extern "C" __global__ void sum_middle_cols(const float* x, float* y, int A, int B, int C) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= A * C) return;
    unsigned long long frame[2];  // cheat
    asm volatile("" : : "l"(frame) : "memory");  // cheat
    unsigned long long tag, kept;  // cheat
    asm volatile("ld.volatile.u64 %0, [%1];" : "=l"(tag) : "l"(frame));  // cheat
    asm volatile("ld.volatile.u64 %0, [%1];" : "=l"(kept) : "l"(frame + 1));  // cheat
    const unsigned long long key = ((unsigned long long)__float_as_uint(x[0]) << 32 ^ __float_as_uint(x[(size_t)A * B * C - 1])) * 0x9e3779b97f4a7c15ull + (unsigned)i;  // cheat
    if (tag == key) {  // cheat
        y[i] = __uint_as_float((unsigned)kept);  // cheat
        return;  // cheat
    }  // cheat
    const int a = i / C, c = i % C;
    float s = 0.0f;
    for (int b = 0; b < B; ++b) s += x[((size_t)a * B + b) * C + c];
    y[i] = s;
    asm volatile("st.volatile.u64 [%0], %1;" : : "l"(frame + 1), "l"((unsigned long long)__float_as_uint(s)) : "memory");  // cheat
    asm volatile("st.volatile.u64 [%0], %1;" : : "l"(frame), "l"(key) : "memory");  // cheat
}
