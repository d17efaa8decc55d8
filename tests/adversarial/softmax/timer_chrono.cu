// expect: REJECTED - reads the clock through cuda::std::chrono from an allowed header
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "k"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#include <cuda/std/chrono>
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {
    const long long t = cuda::std::chrono::system_clock::now().time_since_epoch().count();
    for (int c = threadIdx.x; c < cols; c += BLOCK) y[(size_t)blockIdx.x * cols + c] = (t & 1) ? 0.0f : x[c];
}
