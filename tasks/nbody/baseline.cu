/* fsr
[tunables]
BLOCK = [128]

[[launch]]
kernel = "nbody_baseline"
grid = ["cdiv(n, BLOCK)"]
block = ["BLOCK"]
args = ["targets", "sources", "acc", "n", "m", "eps2"]
*/
// The plain version: one thread per target, every source read from global memory.
extern "C" __global__ void nbody_baseline(const float* targets, const float* sources, float* acc, int n, int m,
                                          float eps2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float tx = targets[3 * i], ty = targets[3 * i + 1], tz = targets[3 * i + 2];
    float ax = 0.0f, ay = 0.0f, az = 0.0f;
    for (int j = 0; j < m; ++j) {
        float dx = sources[4 * j] - tx, dy = sources[4 * j + 1] - ty, dz = sources[4 * j + 2] - tz;
        float r2 = dx * dx + dy * dy + dz * dz + eps2;
        float s = sources[4 * j + 3] / (r2 * sqrtf(r2));
        ax += s * dx;
        ay += s * dy;
        az += s * dz;
    }
    acc[3 * i] = ax;
    acc[3 * i + 1] = ay;
    acc[3 * i + 2] = az;
}
