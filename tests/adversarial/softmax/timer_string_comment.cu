// expect: REJECTED - a string literal holding // once hid the rest of its line, clock64() included
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
    const char* tag = "//"; const long long t = clock64() + tag[0];
    for (int c = threadIdx.x; c < cols; c += BLOCK) y[(size_t)blockIdx.x * cols + c] = (t & 1) ? 0.0f : x[c];
}
