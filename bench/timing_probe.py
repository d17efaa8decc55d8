"""Where a few tenths of a microsecond come from on small kernels: the same ~8 us streaming kernel
timed by the reference loop of tests/gpu/test_timing.py and by variants between it and fsr's
protocol, interleaved over several rounds, medians in microseconds.

    python bench/timing_probe.py [ROUNDS]

Variants: `ref` (every sample queued behind a 100 ms busy kernel), `ref_live` (the same loop
queued while the GPU runs it), `ref_nop` (ref with an empty one-thread kernel between flush and
start event), `ref_hold` (ref with fsr's hold, released at once, between flush and start),
`fsr` (bench.sample with the hold), `fsr_nohold`, `fsr_busy` (bench.sample right after a 100 ms
busy kernel), `batch_hold` (all samples behind one hold, released once queued).

`fsr_1round` (bench.sample taking all 200 samples in one round, not rounds of 30, 30, 60, 80)
and `fsr_nowarm` (bench.sample with the shortest warm-up) separate the protocol's rounds and
warm-up from its chunks. Whether the host queueing work while timed samples run moves them:
`chunks` (fsr's chunked queueing written out: 64 samples a hold, the next chunk queued while
this one runs), `chunks_sync` (the same, but the host waits for a chunk to finish before queueing
the next, so nothing is queued while a sample runs), `batch_busy_host` (batch_hold while the
host queues empty kernels on a second stream during the samples) and `batch_busy_same`
(batch_hold, then empty kernels queued on the same stream behind the samples while they run).
"""

from __future__ import annotations

import statistics
import sys

import cupy as cp
import numpy as np

from fsr.evaluate.gpu import timing as bench

# The streaming and busy-wait kernels of tests/gpu/test_timing.py, and an empty one.
SOURCE = r"""
extern "C" __global__ void stream_scale(const float* x, float* y, long long n, int reps) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        for (int r = 0; r < reps; ++r) v = v * 0.999f + 0.25f;
        y[i] = v;
    }
}

extern "C" __global__ void busy_wait(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}

extern "C" __global__ void nop() {}
"""


def main(rounds: int) -> None:
    module = cp.RawModule(code=SOURCE)
    stream = cp.cuda.Stream(non_blocking=True)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    n = 1 << 20
    x = cp.random.default_rng(0).random(64 << 20, dtype=cp.float32)
    y = cp.empty_like(x)
    flusher, hold = bench.L2Flusher(int(props["l2CacheSize"])), bench.Hold()
    kernel, busy, nop = (module.get_function(k) for k in ("stream_scale", "busy_wait", "nop"))
    grid = (min((n + 255) // 256, props["multiProcessorCount"] * 16),)

    def run(_: int = 0) -> None:
        kernel(grid, (256,), (x, y, np.int64(n), np.int32(0)), stream=stream)

    def fresh(count: int) -> list:
        """Event pairs for `count` samples, after one unheld run and a synchronize."""
        run()
        stream.synchronize()
        return [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(count)]

    def queue(events: list, between=None) -> None:
        """Each sample: flush, (between,) start event, the kernel, end event."""
        for b, e in events:
            flusher.flush(stream)
            if between is not None:
                between()
            b.record(stream)
            run()
            e.record(stream)

    def median(events: list) -> float:
        stream.synchronize()
        return float(np.median([cp.cuda.get_elapsed_time(b, e) * 1000.0 for b, e in events]))

    def loop(count: int = 200, behind: bool = True, between=None) -> float:
        events = fresh(count)
        if behind:
            busy((1,), (1,), (np.uint64(100_000_000),), stream=stream)
        queue(events, between)
        return median(events)

    def held_now() -> None:
        hold.release(hold.hold(stream, 0))

    def fsr(use_hold: bool = True, after_busy: bool = False, min_samples: int = 30, warmup_s: float = 0.03) -> float:
        if after_busy:
            busy((1,), (1,), (np.uint64(100_000_000),), stream=stream)
        s = bench.sample(run, stream, flusher, budget_s=0.15, min_samples=min_samples, max_samples=200,
                         warmup_s=warmup_s, hold=hold if use_hold else None)
        return float(np.median(s))

    def chunks(count: int = 200, size: int = bench.CHUNK_SAMPLES, sync: bool = False) -> float:
        events = fresh(count)
        for k in range(0, count, size):
            if sync:
                stream.synchronize()
            ticket = hold.hold(stream, 0)
            queue(events[k:k + size])
            hold.release(ticket)
        return median(events)

    def batch_hold(count: int = 200) -> float:
        return chunks(count, size=count)

    other = cp.cuda.Stream(non_blocking=True)

    def batch_busy(count: int = 200, same: bool = False) -> float:
        events = fresh(count)
        ticket = hold.hold(stream, 0)
        queue(events)
        hold.release(ticket)
        done = cp.cuda.Event()
        done.record(stream)
        # queue work while the samples run (on the same stream: behind them, as fsr's next chunk)
        target = stream if same else other
        queued = 0
        while not done.done and queued < 4000:
            nop((1,), (1,), (), stream=target)
            queued += 1
        other.synchronize()
        return median(events)

    variants = {
        "ref": lambda: loop(),
        "ref_live": lambda: loop(behind=False),
        "ref_nop": lambda: loop(between=lambda: nop((1,), (1,), (), stream=stream)),
        "ref_hold": lambda: loop(between=held_now),
        "fsr": lambda: fsr(),
        "fsr_nohold": lambda: fsr(use_hold=False),
        "fsr_busy": lambda: fsr(after_busy=True),
        "batch_hold": lambda: batch_hold(),
        "fsr_1round": lambda: fsr(min_samples=200),
        "fsr_nowarm": lambda: fsr(warmup_s=0.0),
        "chunks": lambda: chunks(),
        "chunks_sync": lambda: chunks(sync=True),
        "batch_busy_host": lambda: batch_busy(),
        "batch_busy_same": lambda: batch_busy(same=True),
    }
    results: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            results[name].append(fn())
    ref = statistics.median(results["ref"])
    print(f"{props['name'].decode() if isinstance(props['name'], bytes) else props['name']}: 8 MB stream_scale, "
          f"{rounds} rounds")
    for name, values in results.items():
        m = statistics.median(values)
        print(f"{name:11s} median {m:7.3f} us ({100 * (m / ref - 1):+5.1f}% vs ref)  rounds: "
              + " ".join(f"{v:.2f}" for v in values))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
