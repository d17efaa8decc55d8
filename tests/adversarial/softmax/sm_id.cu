// expect: REJECTED - reads the SM id (a name built by the preprocessor, caught in the PTX): makes where a thread runs repeatable
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "k"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#define SREG(name) "mov.u32 %0, %%" #name ";"
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {
    unsigned sm;
    asm volatile(SREG(smid) : "=r"(sm));
    for (int c = threadIdx.x; c < cols; c += BLOCK) y[(size_t)blockIdx.x * cols + c] = (sm > 1000) ? 0.0f : x[c];
}
