"""How fast can any CSR kernel read spmv_csr's bench inputs on this GPU? Times, with fsr's protocol
(timing.sample, the L2 flushed before each sample), kernels that do only part of an SpMV over the
task's own inputs, with no row structure (entries split evenly over threads, one partial sum per
thread block written out):
- `stream`: sums vals and col_idx as numbers (every byte of both read once, no gather);
- `gather`: sums x[col_idx] (col_idx read, x gathered: the column pattern's cost);
- `flat`: sums vals * x[col_idx] (all an SpMV reads but row_ptr, no rows to keep apart);
- `gather4`, `flat4`: the same four entries a thread at a time (int4 and float4 loads);
- `lanes16`, `coalesced16`, `staged16`: flat4 in warp tiles of 16384 entries, one round of 512 at a
  time: as the template's SEGMENT reads them (each lane 16 consecutive entries a round), with each
  round's loads coalesced, or coalesced and then handed to lanes in runs through shared memory.
Each against the task's fewest bytes at the measured copy rate (its ceiling) and 85% of it.

    python bench/spmv_bound.py
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from fsr import tasks
from fsr.evaluate.gpu import ceilings, timing

SOURCE = r"""
template <int MODE>
__device__ void part(const int* col, const float* vals, const float* x, long long nnz, float* out) {
    float acc = 0.0f;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nnz; i += stride) {
        const int c = __ldcs(col + i);
        if (MODE == 0) acc += __ldcs(vals + i) + (float)c;
        if (MODE == 1) acc += __ldg(x + c);
        if (MODE == 2) acc += __ldcs(vals + i) * __ldg(x + c);
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (threadIdx.x % 32 == 0) atomicAdd(out + blockIdx.x, acc);
}
// four entries a thread at a time (int4 and float4 loads): more loads in flight
template <int MODE>
__device__ void part4(const int* col, const float* vals, const float* x, long long nnz, float* out) {
    float acc = 0.0f;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nnz / 4; i += stride) {
        const int4 c = __ldcs(reinterpret_cast<const int4*>(col) + i);
        if (MODE == 1) acc += __ldg(x + c.x) + __ldg(x + c.y) + __ldg(x + c.z) + __ldg(x + c.w);
        if (MODE == 2) {
            const float4 v = __ldcs(reinterpret_cast<const float4*>(vals) + i);
            acc += v.x * __ldg(x + c.x) + v.y * __ldg(x + c.y) + v.z * __ldg(x + c.z) + v.w * __ldg(x + c.w);
        }
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (threadIdx.x % 32 == 0) atomicAdd(out + blockIdx.x, acc);
}
// Warp tiles as the template's SEGMENT reads them: warp w sums entries [w T, (w + 1) T), T = 512 *
// ROUNDS, 512 a round, one round at a time. MODE 0 (lanes): lane l reads its own 16 consecutive
// entries of a round (four int4 and four float4 loads, 64 bytes apart across lanes); MODE 1
// (coalesced): load q of lane l reads entries 128 q + 4 l .. + 3; MODE 2 (staged): as coalesced,
// the products then handed through swizzled shared memory to lane l as its 16 consecutive ones.
template <int MODE>
__device__ void tiles(const int* col, const float* vals, const float* x, long long nnz, float* out) {
    constexpr int ROUNDS = 32, T = 512 * ROUNDS;
    __shared__ float4 s_quads[8][128];
    const int lane = threadIdx.x % 32;
    float4* quads = s_quads[threadIdx.x / 32 % 8];
    const long long first = ((long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * T;
    float acc = 0.0f;
#pragma unroll 1
    for (long long base = first; base < first + T && base + 512 <= nnz; base += 512) {
        if (MODE == 2) __syncwarp();
        float4 p[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const long long k = MODE == 0 ? base + 16 * lane + 4 * q : base + 128 * q + 4 * lane;
            const int4 c = __ldcs(reinterpret_cast<const int4*>(col + k));
            const float4 v = __ldcs(reinterpret_cast<const float4*>(vals + k));
            p[q] = make_float4(v.x * __ldg(x + c.x), v.y * __ldg(x + c.y), v.z * __ldg(x + c.z), v.w * __ldg(x + c.w));
        }
        if (MODE == 2) {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int j = 32 * q + lane;
                quads[j ^ (j / 8 % 8)] = p[q];
            }
            __syncwarp();
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int j = 4 * lane + q;
                p[q] = quads[j ^ (j / 8 % 8)];
            }
        }
        float run = 0.0f;  // in order, as a lane sums its run
#pragma unroll
        for (int q = 0; q < 4; ++q) run = run + p[q].x + p[q].y + p[q].z + p[q].w;
        acc += run;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) atomicAdd(out + blockIdx.x % 1024, acc);
}
extern "C" __global__ void lanes16(const int* c, const float* v, const float* x, long long n, float* o) { tiles<0>(c, v, x, n, o); }
extern "C" __global__ void coalesced16(const int* c, const float* v, const float* x, long long n, float* o) { tiles<1>(c, v, x, n, o); }
extern "C" __global__ void staged16(const int* c, const float* v, const float* x, long long n, float* o) { tiles<2>(c, v, x, n, o); }
extern "C" __global__ void gather4(const int* c, const float* v, const float* x, long long n, float* o) { part4<1>(c, v, x, n, o); }
extern "C" __global__ void flat4(const int* c, const float* v, const float* x, long long n, float* o) { part4<2>(c, v, x, n, o); }
extern "C" __global__ void stream(const int* c, const float* v, const float* x, long long n, float* o) { part<0>(c, v, x, n, o); }
extern "C" __global__ void gather(const int* c, const float* v, const float* x, long long n, float* o) { part<1>(c, v, x, n, o); }
extern "C" __global__ void flat(const int* c, const float* v, const float* x, long long n, float* o) { part<2>(c, v, x, n, o); }
"""


def main() -> None:
    task = tasks.load("spmv_csr")
    sizes = dict(task.bench_size)
    inputs = tasks.functions(task).make_inputs(sizes, np.random.default_rng(0))
    col, vals, x = (cp.asarray(inputs[k]) for k in ("col_idx", "vals", "x"))
    stream = cp.cuda.Stream(non_blocking=True)
    info = ceilings.device_info()
    hold, flusher = timing.Hold(), timing.L2Flusher(info.l2_bytes)
    copy = ceilings.measure_copy_gbps(stream, hold)
    module = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    out = cp.zeros(max(info.sm_count * 8, 1024), dtype=cp.float32)
    floor_us = tasks.bytes_moved(task, sizes) / (copy * 1e9) * 1e6
    print(f"{info.name}: copy {copy:.0f} GB/s; the task's {tasks.bytes_moved(task, sizes) / 1e6:.1f} MB at it "
          f"take {floor_us:.1f} us (85% of it: {floor_us / 0.85:.1f} us)")
    for name in ("stream", "gather", "flat", "gather4", "flat4", "lanes16", "coalesced16", "staged16"):
        kernel = module.get_function(name)
        warp_tiles = name.endswith("16")
        for block in (256, 512) if not warp_tiles else (256,):
            # warp tiles: one warp a tile of 16384 entries (8 warps a block: s_quads)
            grid = -(-col.size // (16384 * block // 32)) if warp_tiles else info.sm_count * 8

            def run(_: int, kernel=kernel, block=block, grid=grid) -> None:
                kernel((grid,), (block,), (col, vals, x, np.int64(col.size), out), stream=stream)

            us = float(np.median(timing.sample(run, stream, flusher, budget_s=0.3, min_samples=20, max_samples=100,
                                               warmup_s=0.03, hold=hold)))
            print(f"{name} (block {block}): {us:.1f} us, {100 * floor_us / us:.1f}% of the copy ceiling's time")


if __name__ == "__main__":
    main()
