"""Does the L2 flush between samples decide which mode an ~8 us kernel runs in? A flush that
writes a buffer twice the L2 size (cudaMemsetAsync, fsr's before) leaves the L2 full of dirty
lines that the timed kernel then evicts, writing them back to DRAM inside its timed region.
This times the 8 MB streaming kernel of tests/gpu/test_timing.py (and the 512 MB one) behind
four flushes, in alternating rounds: `memset`, `read` (a kernel that reads a buffer twice the
L2 size: the L2 ends full of clean lines), `memset+read` (both), `fsr` (bench.L2Flusher). Each round: the
test's reference loop (200 samples queued behind a 100 ms busy kernel) and fsr's protocol.
Also checks that each flush evicts: a kernel rereading a 16 MB input, unflushed against flushed.

    python bench/flush_modes.py [ROUNDS]
"""

from __future__ import annotations

import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ beside fsr/

from fsr.evaluate import bench  # noqa: E402
from tests.gpu.test_timing import SOURCE  # noqa: E402


class MemsetFlusher:
    """The flush before: a memset of twice the L2 size, nothing else."""

    def __init__(self, l2_bytes: int):
        self.buffer = cp.empty(max(2 * l2_bytes, 8 << 20), dtype=cp.uint8)

    def flush(self, stream: cp.cuda.Stream) -> None:
        cp.cuda.runtime.memsetAsync(self.buffer.data.ptr, 0x5A, self.buffer.nbytes, stream.ptr)


class ReadFlusher:
    """A read of twice the L2 size, nothing else."""

    def __init__(self, l2_bytes: int):
        self.buffer = cp.zeros(max(2 * l2_bytes, 8 << 20) // 16 * 16, dtype=cp.uint8)
        self.read = bench.ReadKernel()

    def flush(self, stream: cp.cuda.Stream) -> None:
        self.read(self.buffer, stream)


class Both:
    def __init__(self, *flushers):
        self.flushers = flushers

    def flush(self, stream: cp.cuda.Stream) -> None:
        for f in self.flushers:
            f.flush(stream)


def main(rounds: int) -> None:
    module = cp.RawModule(code=SOURCE)
    stream = cp.cuda.Stream(non_blocking=True)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    sms, l2 = props["multiProcessorCount"], int(props["l2CacheSize"])
    x = cp.random.default_rng(0).random(64 << 20, dtype=cp.float32)
    y = cp.empty_like(x)
    memset, read = MemsetFlusher(l2), ReadFlusher(l2)
    flushes = {"memset": memset, "read": read, "memset+read": Both(memset, read), "fsr": bench.L2Flusher(l2)}
    hold = bench.Hold()
    kernel, busy = module.get_function("stream_scale"), module.get_function("busy_wait")

    def runner(n: int):
        grid = (min((n + 255) // 256, sms * 16),)
        return lambda _=0: kernel(grid, (256,), (x, y, np.int64(n), np.int32(0)), stream=stream)

    def loop(run, flusher, count: int = 200) -> float:
        events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(count)]
        run()
        stream.synchronize()
        busy((1,), (1,), (np.uint64(100_000_000),), stream=stream)
        for b, e in events:
            if flusher is not None:
                flusher.flush(stream)
            b.record(stream)
            run()
            e.record(stream)
        stream.synchronize()
        return float(np.median([cp.cuda.get_elapsed_time(b, e) * 1000.0 for b, e in events]))

    def fsr(run, flusher) -> float:
        return float(np.median(bench.sample(run, stream, flusher, budget_s=0.15, min_samples=30, max_samples=200,
                                            warmup_s=0.03, hold=hold)))

    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    print(f"{name}, L2 {l2 >> 20} MiB, {sms} SMs")
    reread = runner(4 << 20)  # 16 MB in, 16 MB out: fits the L2
    print("eviction check (16 MB in + 16 MB out), median us: unflushed "
          f"{loop(reread, None):.2f}; " + "; ".join(f"{k} {loop(reread, f):.2f}" for k, f in flushes.items()))
    for label, n in (("8 MB", 1 << 20), ("512 MB", 64 << 20)):
        run = runner(n)
        table = {k: ([], []) for k in flushes}
        for _ in range(rounds if n == 1 << 20 else 2):
            for k, f in flushes.items():
                table[k][0].append(loop(run, f))
                table[k][1].append(fsr(run, f))
        for k, (lo, fs) in table.items():
            spread = lambda v: 100 * (max(v) - min(v)) / min(v)  # noqa: E731
            print(f"{label} {k}: loop {' '.join(f'{v:.2f}' for v in lo)} (spread {spread(lo):.1f}%); "
                  f"fsr {' '.join(f'{v:.2f}' for v in fs)} (spread {spread(fs):.1f}%); "
                  f"fsr/loop median {np.median(np.asarray(fs) / np.asarray(lo)):.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
