// expect: REJECTED - reads %globaltimer through an inline-asm string split in two (caught in the PTX)
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "k"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%glob" "altimer;" : "=l"(t));
    for (int c = threadIdx.x; c < cols; c += BLOCK) y[(size_t)blockIdx.x * cols + c] = (t & 1) ? 0.0f : x[c];
}
