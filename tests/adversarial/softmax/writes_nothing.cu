// expect: WRONG — never writes its output
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "k"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {}
