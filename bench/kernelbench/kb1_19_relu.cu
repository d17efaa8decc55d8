/* fsr
[tunables]
BLOCK = [256, 512, 128]
VEC = [4, 1]

[[launch]]
kernel = "relu"
grid = ["cdiv(cdiv(batch_size * dim, VEC), BLOCK)"]
block = ["BLOCK"]
args = ["x", "out", "batch_size", "dim"]
*/
// ReLU, VEC elements a thread (float4 where the row length allows; the tail element by element).
extern "C" __global__ void relu(const float* __restrict__ x, float* __restrict__ out, int batch_size, int dim) {
    const long long n = (long long)batch_size * dim;
    const long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (VEC == 4 && i + 3 < n) {
        float4 v = *reinterpret_cast<const float4*>(x + i);
        v.x = fmaxf(v.x, 0.0f); v.y = fmaxf(v.y, 0.0f); v.z = fmaxf(v.z, 0.0f); v.w = fmaxf(v.w, 0.0f);
        *reinterpret_cast<float4*>(out + i) = v;
        return;
    }
    for (long long j = i; j < i + VEC && j < n; ++j) out[j] = fmaxf(x[j], 0.0f);
}
