/* fsr
[[tensormap]]
name = "a_tiles"
buffer = "A"
dims = ["K", "M"]
box = ["32", "64"]

[[tensormap]]
name = "b_tiles"
buffer = "B"
dims = ["N", "K"]
box = ["64", "32"]

[[launch]]
kernel = "gemm_tma"
when = "K % 8 == 0 and N % 8 == 0"
grid = ["cdiv(N, 64)", "cdiv(M, 64)"]
block = [256]
args = ["a_tiles", "b_tiles", "C", "M", "N", "K"]

[[launch]]
kernel = "gemm_plain"
when = "K % 8 != 0 or N % 8 != 0"
grid = ["cdiv(N, 64)", "cdiv(M, 64)"]
block = [256]
args = ["A", "B", "C", "M", "N", "K"]
*/
// A small honest GEMM whose operand tiles arrive by the tensor memory accelerator: one thread
// issues a cp.async.bulk.tensor copy of a 64 x 32 tile of A and a 32 x 64 tile of B into shared
// memory, completing on an mbarrier that every thread waits on; the products are float32 FMAs.
// Rows of A and B are 16-byte aligned only where K and N are multiples of 8, which TMA needs of
// a map's strides: at other sizes the second launch loads the same tiles with plain loads. It
// shows the tensor map path works, not speed.
#include <cuda_bf16.h>

#define BM 64
#define BN 64
#define BK 32

// Thread t computes rows t / 16 + 16 i and columns t % 16 + 16 j of the 64 x 64 tile.
__device__ __forceinline__ void multiply(const __nv_bfloat16* As, const __nv_bfloat16* Bs, float (&acc)[4][4]) {
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll 8
    for (int k = 0; k < BK; ++k) {
        float a[4], b[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = __bfloat162float(As[(ty + 16 * i) * BK + k]);
#pragma unroll
        for (int j = 0; j < 4; ++j) b[j] = __bfloat162float(Bs[k * BN + tx + 16 * j]);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

__device__ __forceinline__ void store(const float (&acc)[4][4], __nv_bfloat16* C, int M, int N) {
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = blockIdx.y * BM + ty + 16 * i, c = blockIdx.x * BN + tx + 16 * j;
            if (r < M && c < N) C[(size_t)r * N + c] = __float2bfloat16_rn(acc[i][j]);
        }
}

__device__ __forceinline__ unsigned smem_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void load_tile(void* dst, const CUtensorMap* map, int x, int y, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(smem_address(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ void wait(unsigned bar, unsigned phase) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar), "r"(phase) : "memory");
}

extern "C" __global__ void __launch_bounds__(256) gemm_tma(const __grid_constant__ CUtensorMap a_tiles,
                                                           const __grid_constant__ CUtensorMap b_tiles,
                                                           __nv_bfloat16* C, int M, int N, int K) {
    __shared__ alignas(128) __nv_bfloat16 As[BM * BK];  // As[m][k]: the box's inner dimension (K) contiguous
    __shared__ alignas(128) __nv_bfloat16 Bs[BK * BN];  // Bs[k][n]
    __shared__ alignas(8) unsigned long long full;
    const unsigned bar = smem_address(&full);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    float acc[4][4] = {};
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    for (int k0 = 0, step = 0; k0 < K; k0 += BK, ++step) {
        if (threadIdx.x == 0) {
            // a box partly outside the matrix is filled with zeros, and still counts in full
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                         :: "r"(bar), "r"((unsigned)sizeof(As) + (unsigned)sizeof(Bs)) : "memory");
            load_tile(As, &a_tiles, k0, m0, bar);  // coordinates innermost first: (k, m)
            load_tile(Bs, &b_tiles, n0, k0, bar);  // (n, k)
        }
        wait(bar, step & 1);
        multiply(As, Bs, acc);
        __syncthreads();  // every thread has read the tiles before the next copy overwrites them
    }
    store(acc, C, M, N);
}

extern "C" __global__ void __launch_bounds__(256) gemm_plain(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                                             __nv_bfloat16* C, int M, int N, int K) {
    __shared__ __nv_bfloat16 As[BM * BK];
    __shared__ __nv_bfloat16 Bs[BK * BN];
    const __nv_bfloat16 zero = __float2bfloat16(0.0f);
    float acc[4][4] = {};
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += blockDim.x) {
            const int m = m0 + i / BK, k = k0 + i % BK;
            As[i] = m < M && k < K ? A[(size_t)m * K + k] : zero;
            const int kb = k0 + i / BN, n = n0 + i % BN;
            Bs[i] = kb < K && n < N ? B[(size_t)kb * N + n] : zero;
        }
        __syncthreads();
        multiply(As, Bs, acc);
        __syncthreads();
    }
    store(acc, C, M, N);
}
