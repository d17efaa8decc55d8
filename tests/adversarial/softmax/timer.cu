// expect: REJECTED — reads a clock, so it could behave differently when timed
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "k"
grid = ["1"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) { y[0] = (float)clock64(); }
