// expect: REJECTED - a 16 MiB __device__ array: over the module-variable bound, known from the cubin before any GPU time
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "k"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
__device__ float stash[4 << 20];
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {
    for (int c = threadIdx.x; c < cols; c += BLOCK) { stash[c] = x[c]; y[(size_t)blockIdx.x * cols + c] = stash[c]; }
}
