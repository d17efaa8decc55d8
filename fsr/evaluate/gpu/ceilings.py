"""The device's properties and measured ceilings (copy and read bandwidth, library SGEMM, the
TF32 tensor-core rate), measured once per GPU child: the roofline and the plausibility bound.
"""

from __future__ import annotations

from collections.abc import Callable

import cupy as cp
import numpy as np

from fsr.evaluate.gpu.timing import Hold, ReadKernel
from fsr.types import DeviceInfo


def device_info(arch_override: str = "") -> DeviceInfo:
    """The current device's properties (no ceilings yet)."""
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return DeviceInfo(
        name=name, arch=arch_override or f"sm_{props['major']}{props['minor']}",
        sm_count=int(props["multiProcessorCount"]), smem_per_block=int(props["sharedMemPerBlock"]),
        smem_per_block_optin=int(props.get("sharedMemPerBlockOptin", props["sharedMemPerBlock"])),
        smem_per_sm=int(props["sharedMemPerMultiprocessor"]), l2_bytes=int(props["l2CacheSize"]),
        regs_per_sm=int(props["regsPerMultiprocessor"]))


def measure_copy_gbps(stream: cp.cuda.Stream, hold: Hold | None = None, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy rate, bytes read plus bytes written per second (the fastest of 10:
    a ceiling, measured with the runs queued behind `hold`, so a busy host cannot lower it)."""
    src = cp.ones(nbytes, dtype=cp.uint8)
    dst = cp.empty_like(src)

    def run(_: int) -> None:
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, cp.cuda.runtime.memcpyDeviceToDevice,
                                    stream.ptr)

    return 2 * nbytes / (min(_plain_times(run, stream, 10, hold)) * 1e-6) / 1e9


def measure_read_gbps(stream: cp.cuda.Stream, hold: Hold | None = None, nbytes: int = 1 << 30) -> float:
    """Streaming read rate (the flush's read kernel over 1 GiB, nothing written), the fastest of
    10: a kernel that mostly reads can move bytes faster than a copy, which writes half of them."""
    src = cp.ones(nbytes // 16 * 16, dtype=cp.uint8)
    read = ReadKernel()

    def run(_: int) -> None:
        read(src, stream)

    return src.nbytes / (min(_plain_times(run, stream, 10, hold)) * 1e-6) / 1e9


def measure_sgemm_tflops(stream: cp.cuda.Stream, hold: Hold | None = None, n: int = 8192) -> float:
    """cuBLAS float32 matrix product rate through cupy.matmul (no TF32), the fastest of 5."""
    rng = cp.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=cp.float32)
    b = rng.standard_normal((n, n), dtype=cp.float32)
    out = cp.empty((n, n), dtype=cp.float32)

    def run(_: int) -> None:
        with stream:
            cp.matmul(a, b, out=out)

    return 2 * n ** 3 / (min(_plain_times(run, stream, 5, hold)) * 1e-6) / 1e12


def measure_half_tflops(stream: cp.cuda.Stream, hold: Hold | None = None, n: int = 8192) -> float:
    """cuBLAS 16-bit matrix product rate (float16 through cupy.matmul, float32 accumulation, on
    the tensor cores; bfloat16 runs at the same rate), the fastest of 5; 0.0 before sm_70."""
    if int(cp.cuda.Device().compute_capability) < 70:
        return 0.0
    rng = cp.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
    b = rng.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
    out = cp.empty((n, n), dtype=cp.float16)

    def run(_: int) -> None:
        with stream:
            cp.matmul(a, b, out=out)

    return 2 * n ** 3 / (min(_plain_times(run, stream, 5, hold)) * 1e-6) / 1e12


MMA_RATE_SOURCE = r"""
extern "C" __global__ void fsr_mma_rate(int iters, float* out) {
    const unsigned a[4] = {0x3f800000u, 0x3f800000u, 0x3f800000u, 0x3f800000u}, b[2] = {0x3c000000u, 0x3c000000u};
    float c[8][4] = {};
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int t = 0; t < 8; ++t)  // eight independent accumulators: the MMA pipe stays full
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                         "{%8, %9}, {%0, %1, %2, %3};"
                         : "+f"(c[t][0]), "+f"(c[t][1]), "+f"(c[t][2]), "+f"(c[t][3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    float s = 0.0f;
#pragma unroll
    for (int t = 0; t < 8; ++t) s += c[t][0] + c[t][1] + c[t][2] + c[t][3];
    if (s == 1.5f) out[0] = s;  // never: keeps the MMAs
}
"""


def measure_tensor_tflops(stream: cp.cuda.Stream, hold: Hold | None = None, iters: int = 2048) -> float:
    """TF32 tensor-core MMA rate (mma.sync m16n8k8 from registers, 32 warps an SM), the fastest of
    5; 0.0 before sm_80. A float32-accurate product from split TF32 (three MMAs) reaches at most a
    third of it: the SGEMM plausibility bound for kernels that use the tensor cores."""
    dev = cp.cuda.Device()
    if int(dev.compute_capability) < 80:  # a string: "90", "100"
        return 0.0
    kernel = cp.RawKernel(MMA_RATE_SOURCE, "fsr_mma_rate")
    out = cp.zeros(1, dtype=cp.float32)
    blocks = dev.attributes["MultiProcessorCount"] * 4

    def run(_: int) -> None:
        kernel((blocks,), (256,), (np.int32(iters), out), stream=stream)

    flops = blocks * 8 * iters * 8 * 2 * 16 * 8 * 8
    return flops / (min(_plain_times(run, stream, 5, hold)) * 1e-6) / 1e12


# The device's measured ceilings, by DeviceInfo field: measured once per GPU child.
CEILINGS: dict[str, Callable[[cp.cuda.Stream, Hold | None], float]] = {
    "copy_gbps": measure_copy_gbps, "read_gbps": measure_read_gbps,
    "sgemm_tflops": measure_sgemm_tflops, "tensor_tflops": measure_tensor_tflops,
    "half_tflops": measure_half_tflops}


def _plain_times(run: Callable[[int], None], stream: cp.cuda.Stream, count: int, hold: Hold | None) -> list[float]:
    """Device microseconds of `count` back-to-back runs after two unheld ones (the first call of a
    library allocates; the second brings the clocks up), all queued behind `hold` when given.
    A host stalled between a start event and its launch (a CPU busy building references) once
    read cuBLAS 27% slow and made an honest kernel SUSPECT."""
    for i in range(2):
        run(i)
    stream.synchronize()
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(count)]
    ticket = hold.hold(stream, 0) if hold is not None else 0
    for i, (begin, end) in enumerate(events):
        begin.record(stream)
        run(i)
        end.record(stream)
    if hold is not None:
        hold.release(ticket)
    stream.synchronize()
    return [cp.cuda.get_elapsed_time(b, e) * 1000.0 for b, e in events]
