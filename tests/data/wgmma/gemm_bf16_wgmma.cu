/* fsr
[[launch]]
kernel = "gemm_bf16_wgmma"
grid = ["cdiv(N, 64)", "cdiv(M, 64)"]
block = [128]
args = ["A", "B", "C", "M", "N", "K"]
*/
// A small honest wgmma GEMM for sm_90a: one warpgroup (128 threads) per 64 x 64 tile of C, one
// wgmma.mma_async m64n64k16 (bfloat16 in, float32 accumulators) per 16 of K, both operands read
// from shared memory through matrix descriptors (K-major, no swizzle). No pipelining: it shows
// the instruction forms compile and compute, not speed.
#include <cuda_bf16.h>

// Core matrices of 8 rows x 16 bytes (8 bfloat16 of K), stored whole: element (r, k) of a
// 64 x 16 K-major tile at (r / 8) * SBO + (k / 8) * LBO + (r % 8) * 16 bytes + (k % 8) * 2.
#define LBO_BYTES 128  // between the two core matrices along K
#define SBO_BYTES 256  // between groups of 8 rows
__device__ __forceinline__ int tile_index(int r, int k) {
    return (r / 8) * (SBO_BYTES / 2) + (k / 8) * (LBO_BYTES / 2) + (r % 8) * 8 + (k % 8);
}

__device__ __forceinline__ unsigned long long descriptor(const void* smem) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(smem);
    return (unsigned long long)((addr & 0x3FFFF) >> 4)           // start address, bits 0-13
           | (unsigned long long)(LBO_BYTES >> 4) << 16           // leading byte offset, bits 16-29
           | (unsigned long long)(SBO_BYTES >> 4) << 32;          // stride byte offset, bits 32-45
}                                                                 // bits 62-63 zero: no swizzle

extern "C" __global__ void __launch_bounds__(128) gemm_bf16_wgmma(
        const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K) {
    __shared__ alignas(128) __nv_bfloat16 As[64 * 16];  // rows of A: m
    __shared__ alignas(128) __nv_bfloat16 Bs[64 * 16];  // columns of B: n (B transposed)
    const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64, t = threadIdx.x;
    const __nv_bfloat16 zero = __float2bfloat16(0.0f);
    float d[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) d[i] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int i = t; i < 64 * 16; i += 128) {
            const int r = i / 16, k = i % 16;
            As[tile_index(r, k)] = m0 + r < M && k0 + k < K ? A[(size_t)(m0 + r) * K + k0 + k] : zero;
            const int kb = i / 64, n = i % 64;  // consecutive threads read consecutive columns of B
            Bs[tile_index(n, kb)] = n0 + n < N && k0 + kb < K ? B[(size_t)(k0 + kb) * N + n0 + n] : zero;
        }
        // the tiles were written through the generic proxy; wgmma reads them through the async one
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
            "%32, %33, p, 1, 1, 0, 0;\n}"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(descriptor(As)), "l"(descriptor(Bs)));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        __syncthreads();  // every warp's wgmma has read the tiles before they are overwritten
    }
    // accumulator d[4 * j + v]: row 16 * warp + lane / 4 + 8 * (v / 2), column 8 * j + 2 * (lane % 4) + v % 2
    const int warp = t / 32, lane = t % 32;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        const int r = m0 + 16 * warp + lane / 4 + 8 * ((i % 4) / 2), c = n0 + 8 * (i / 4) + 2 * (lane % 4) + i % 2;
        if (r < M && c < N) C[(size_t)r * N + c] = __float2bfloat16_rn(d[i]);
    }
}
