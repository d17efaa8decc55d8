// expect: REJECTED — includes a file from the evaluator's disk
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "k"
grid = ["1"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#include "/etc/passwd"
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) { y[0] = x[0]; }
