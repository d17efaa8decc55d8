// expect: REJECTED - reads %clock64 through cuda::ptx::get_sreg_clock64 from an allowed header
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "k"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#include <cuda/ptx>
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {
    const unsigned long long t = cuda::ptx::get_sreg_clock64();
    for (int c = threadIdx.x; c < cols; c += BLOCK) y[(size_t)blockIdx.x * cols + c] = (t & 1) ? 0.0f : x[c];
}
