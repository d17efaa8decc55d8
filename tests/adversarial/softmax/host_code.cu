// expect: REJECTED — host API call
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "k"
grid = ["1"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) { y[0] = x[0]; }
void host_side(float* p) { cudaMemset(p, 0, 4); }
