// expect: LAUNCH_ERROR — asks for more threads per block than the device allows
/* fsr
[tunables]
BLOCK = [2048]

[[launch]]
kernel = "k"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) { }
