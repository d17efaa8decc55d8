// expect: WRONG — each thread takes cols / BLOCK columns: right only when BLOCK divides cols
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
    __shared__ float red[32];
    const float* xr = x + (size_t)blockIdx.x * cols;
    int per = cols / BLOCK, c0 = threadIdx.x * per;
    float m = -INFINITY;
    for (int c = c0; c < c0 + per; ++c) m = fmaxf(m, xr[c]);
    red[threadIdx.x] = m; __syncthreads();
    if (threadIdx.x == 0) { for (int i = 1; i < BLOCK; ++i) m = fmaxf(m, red[i]); red[0] = m; }
    __syncthreads(); m = red[0]; __syncthreads();
    float s = 0.0f;
    for (int c = c0; c < c0 + per; ++c) s += expf(xr[c] - m);
    red[threadIdx.x] = s; __syncthreads();
    if (threadIdx.x == 0) { s = 0.0f; for (int i = 0; i < BLOCK; ++i) s += red[i]; red[0] = s; }
    __syncthreads(); s = red[0];
    for (int c = c0; c < c0 + per; ++c) y[(size_t)blockIdx.x * cols + c] = expf(xr[c] - m) / s;
}
