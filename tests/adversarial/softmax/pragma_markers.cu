// expect: OK - the honest twin of timer_in_pragmas.cu: the same pragmas, whose strings hold /*, */ and //, around an instruction that reads no timer; a softmax right at every size
/* fsr
[tunables]
BLOCK = [32]

[[launch]]
kernel = "k"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
#define BETWEEN_MARKERS(reg) ".pragma \"/*\";\n\tmov.u32 %0, %%" #reg ";\n\t.pragma \"*/\"; .pragma \"//\";"
__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {
    unsigned lane;
    asm volatile(BETWEEN_MARKERS(laneid) : "=r"(lane));
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = lane; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    float s = 0.0f;
    for (int c = lane; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = warp_sum(s);
    #pragma unroll 1
    for (int c = lane; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / s;
}
