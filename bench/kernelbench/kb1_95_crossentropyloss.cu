/* fsr
[tunables]
BLOCK = [256, 512]

[[scratch]]
name = "rows_loss"
dtype = "float32"
count = "batch_size"

[[launch]]
kernel = "row_loss"
grid = ["batch_size"]
block = ["BLOCK"]
args = ["predictions", "targets", "rows_loss", "num_classes"]

[[launch]]
kernel = "mean_loss"
grid = ["1"]
block = ["1024"]
args = ["rows_loss", "out", "batch_size"]
*/
// Cross entropy, mean over the batch: a block a row (max, then the sum of exp), then one block
// averages the rows' losses in a fixed order (no atomics: the same result every run).
__device__ __forceinline__ float block_reduce(float v, bool is_max, float* red) {
    for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < warps ? red[lane] : (is_max ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    return v;
}

extern "C" __global__ void row_loss(const float* __restrict__ predictions, const long long* __restrict__ targets,
                                    float* __restrict__ rows_loss, int num_classes) {
    __shared__ float red[32];
    const float* row = predictions + (size_t)blockIdx.x * num_classes;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < num_classes; c += blockDim.x) m = fmaxf(m, row[c]);
    m = block_reduce(m, true, red);
    float s = 0.0f;
    for (int c = threadIdx.x; c < num_classes; c += blockDim.x) s += expf(row[c] - m);
    s = block_reduce(s, false, red);
    if (threadIdx.x == 0) rows_loss[blockIdx.x] = m + logf(s) - row[targets[blockIdx.x]];
}

extern "C" __global__ void mean_loss(const float* __restrict__ rows_loss, float* __restrict__ out, int batch_size) {
    __shared__ float red[32];
    float s = 0.0f;
    for (int i = threadIdx.x; i < batch_size; i += blockDim.x) s += rows_loss[i];
    s = block_reduce(s, false, red);
    if (threadIdx.x == 0) out[0] = s / batch_size;
}
