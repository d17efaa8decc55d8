// expect: TIMEOUT — spins on a value read from global memory, which never changes
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "k"
grid = ["1"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {
    volatile const float* v = x;
    while (v[0] == v[0]) { }  // finite inputs: never exits; volatile keeps the load in the loop
    y[0] = 0.0f;
}
