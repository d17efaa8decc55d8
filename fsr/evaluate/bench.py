"""Timing on the device: CUDA events around all of a candidate's launches, on one stream fsr
owns, L2 flushed before every sample, input sets rotated, a time budget instead of a count.
Also the device's ceilings (copy bandwidth, library SGEMM), measured once per child.

Runs in the evaluator's child process only (imports cupy).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import cupy as cp
import numpy as np

from fsr.types import DeviceInfo


class L2Flusher:
    """Writes a buffer twice the L2 size, so no sample starts with its inputs in cache."""

    def __init__(self, l2_bytes: int):
        self.buffer = cp.empty(max(2 * l2_bytes, 8 << 20), dtype=cp.uint8)
        self.count = 0

    def flush(self, stream: cp.cuda.Stream) -> None:
        self.count += 1
        cp.cuda.runtime.memsetAsync(self.buffer.data.ptr, self.count & 0xFF, self.buffer.nbytes, stream.ptr)


def sample(run: Callable[[int], None], stream: cp.cuda.Stream, flusher: L2Flusher, *, budget_s: float,
           min_samples: int, max_samples: int, warmup_s: float,
           before: Callable[[int], None] | None = None) -> list[float]:
    """Device microseconds of `run(i)` (i picks the input set), one sample per flushed run.

    Warm-up runs until `warmup_s` has passed (at least twice), which also estimates the time per
    run; then as many samples as fit in `budget_s`, clamped to [min_samples, max_samples].
    `before(i)` runs outside the timed region (e.g. zeroing scratch)."""
    prepare = before or (lambda _: None)
    start = time.perf_counter()
    n = 0
    while n < 2 or time.perf_counter() - start < warmup_s:
        flusher.flush(stream)
        prepare(n)
        run(n)
        stream.synchronize()
        n += 1
    per_run = (time.perf_counter() - start) / n
    count = int(min(max(budget_s / max(per_run, 1e-6), min_samples), max_samples))
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(count)]
    for i, (begin, end) in enumerate(events):
        flusher.flush(stream)
        prepare(i)
        begin.record(stream)
        run(i)
        end.record(stream)
    stream.synchronize()
    return [cp.cuda.get_elapsed_time(b, e) * 1000.0 for b, e in events]


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


def measure_copy_gbps(stream: cp.cuda.Stream, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy rate, bytes read plus bytes written per second (median of 10)."""
    src = cp.ones(nbytes, dtype=cp.uint8)
    dst = cp.empty_like(src)

    def run(_: int) -> None:
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, cp.cuda.runtime.memcpyDeviceToDevice,
                                    stream.ptr)

    times = _plain_times(run, stream, 10)
    return 2 * nbytes / (float(np.median(times)) * 1e-6) / 1e9


def measure_sgemm_tflops(stream: cp.cuda.Stream, n: int = 8192) -> float:
    """cuBLAS float32 matrix product rate through cupy.matmul (no TF32), median of 5."""
    rng = cp.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=cp.float32)
    b = rng.standard_normal((n, n), dtype=cp.float32)
    out = cp.empty((n, n), dtype=cp.float32)

    def run(_: int) -> None:
        with stream:
            cp.matmul(a, b, out=out)

    times = _plain_times(run, stream, 5)
    return 2 * n ** 3 / (float(np.median(times)) * 1e-6) / 1e12


def _plain_times(run: Callable[[int], None], stream: cp.cuda.Stream, count: int) -> list[float]:
    run(0)
    stream.synchronize()
    out = []
    for i in range(count):
        begin, end = cp.cuda.Event(), cp.cuda.Event()
        begin.record(stream)
        run(i)
        end.record(stream)
        end.synchronize()
        out.append(cp.cuda.get_elapsed_time(begin, end) * 1000.0)
    return out
