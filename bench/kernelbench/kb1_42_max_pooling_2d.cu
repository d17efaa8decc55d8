/* fsr
[tunables]
BLOCK = [256, 128]

[[launch]]
kernel = "maxpool2d"
grid = ["cdiv((height - 1) * (width - 1), BLOCK)", "batch_size * channels"]
block = ["BLOCK"]
args = ["x", "out", "height", "width", "kernel_size", "stride", "padding", "dilation"]
*/
// MaxPool2d as PyTorch defines it (padding counts as -inf); a thread an output element.
extern "C" __global__ void maxpool2d(const float* __restrict__ x, float* __restrict__ out, int height, int width,
                                     int kernel_size, int stride, int padding, int dilation) {
    const int oh_n = (height + 2 * padding - dilation * (kernel_size - 1) - 1) / stride + 1;
    const int ow_n = (width + 2 * padding - dilation * (kernel_size - 1) - 1) / stride + 1;
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= oh_n * ow_n) return;
    const int oh = o / ow_n, ow = o % ow_n;
    const float* plane = x + (size_t)blockIdx.y * height * width;
    float m = -INFINITY;
    for (int i = 0; i < kernel_size; ++i) {
        const int h = oh * stride - padding + i * dilation;
        if (h < 0 || h >= height) continue;
        for (int j = 0; j < kernel_size; ++j) {
            const int w = ow * stride - padding + j * dilation;
            if (w >= 0 && w < width) m = fmaxf(m, plane[(size_t)h * width + w]);
        }
    }
    out[(size_t)blockIdx.y * oh_n * ow_n + o] = m;
}
