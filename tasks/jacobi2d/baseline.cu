/* fsr
[tunables]
BX = [32]
BY = [8]

[[launch]]
kernel = "jacobi_baseline"
grid = ["cdiv(nx, BX)", "cdiv(ny, BY)"]
block = ["BX", "BY"]
args = ["u", "v", "ny", "nx"]
*/
// The plain version: one thread per point, five loads from global memory.
extern "C" __global__ void jacobi_baseline(const float* u, float* v, int ny, int nx) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= ny || j >= nx) return;
    size_t at = (size_t)i * nx + j;
    if (i == 0 || j == 0 || i == ny - 1 || j == nx - 1) {
        v[at] = u[at];
    } else {
        v[at] = 0.25f * ((u[at - nx] + u[at + nx]) + (u[at - 1] + u[at + 1]));
    }
}
