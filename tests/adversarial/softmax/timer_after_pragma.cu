// expect: REJECTED - reads %globaltimer on the line of a pragma whose string holds // (its name built by the preprocessor): a pattern that strips comments without knowing PTX strings saw no timer; caught in the PTX
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "k"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#define CAT(a, b) a##b
#define STR(x) #x
#define XSTR(x) STR(x)
#define AFTER_MARKER(reg) ".pragma \"//\"; mov.u64 %0, %%" XSTR(reg) ";"
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {
    unsigned long long t;
    asm volatile(AFTER_MARKER(CAT(glob, altimer)) : "=l"(t));
    for (int c = threadIdx.x; c < cols; c += BLOCK) y[(size_t)blockIdx.x * cols + c] = (t == 1) ? 0.0f : x[c];
}
