// expect: WRONG — never writes its output: the bfloat16 poison (all-ones bytes) is NaN
/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "k"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#include <cuda_bf16.h>

extern "C" __global__ void k(const __nv_bfloat16* x, __nv_bfloat16* y, int rows, int cols) {}
