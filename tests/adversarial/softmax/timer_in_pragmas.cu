// expect: REJECTED - reads %globaltimer between two pragmas whose strings hold /* and */ (its name built by the preprocessor): a pattern that strips comments without knowing PTX strings saw no timer; caught in the PTX
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
#define BETWEEN_MARKERS(reg) ".pragma \"/*\";\n\tmov.u64 %0, %%" XSTR(reg) ";\n\t.pragma \"*/\";"
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {
    unsigned long long t;
    asm volatile(BETWEEN_MARKERS(CAT(glob, altimer)) : "=l"(t));
    for (int c = threadIdx.x; c < cols; c += BLOCK) y[(size_t)blockIdx.x * cols + c] = (t == 1) ? 0.0f : x[c];
}
