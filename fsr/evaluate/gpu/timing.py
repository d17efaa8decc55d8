"""Timing on the device: CUDA events around all of a candidate's launches, on one stream fsr
owns, L2 flushed (and left clean) before every sample, input sets rotated, a time budget instead of a count.

The host never stretches a sample: samples are queued in chunks, each behind a one-thread kernel
(`Hold`) that holds the stream until the host has queued every flush, start event, launch and
end event of the chunk, so the GPU runs them back to back however long Python took to queue
them (nvbench's "blocking kernel"). Without it, launches queued after the GPU has drained the
flush put host time inside the timed region (about 1.3 us and more per sample on an H200: +16%
on an 8 us kernel). The hold sits in front of a chunk, not between a flush and its sample: any
kernel there, even an empty one, read 0.2 us (+2%) slow on an 8 us kernel
(bench/timing_probe.py). And the next chunk is queued only once the last has run: the host
queueing work while timed samples run slows them, even on another stream (on an H200, 8 us
samples read 1.7% slow with the next chunk queued meanwhile, 0.6% with this wait, 16% with empty
kernels queued on a second stream).

Every sample is prepared as a checked launch is, outside the timed region and before the flush
(the caller's `before`: fsr.evaluate.gpu.timed_runs poisons outputs and scratch and restores module
variables), and checked after its end event (`after`), so a kernel cannot tell a timed launch
from a checked one by what it finds in memory. The reset's writes go before the flush, which
leaves them out of the L2 as a checked launch finds its freshly poisoned buffers; the check reads
outputs after the end event and writes nothing the next flush does not replace.

Samples come until the median is known well enough (`rel_error`: the standard error of the
median, from the median absolute deviation, relative to the median) or the budget is spent, so
a steady kernel of milliseconds is not run 45 times for a figure 10 runs already pin down; and
(racing) until they show the candidate clearly slower than the best the caller knows of.

Runs in the evaluator's child process only (imports cupy).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from typing import Protocol

import cupy as cp
import numpy as np

RACE_Z = 3.0  # standard errors of the median below it a raced candidate must still be slower (racing)
RACE_MARGIN = 0.05  # ...than the best known by this much
HOLD_TIMEOUT_S = 0.02  # a hold the host has not released by then lets go, and its samples are dropped
CHUNK_QUEUE_S = 0.004  # a chunk's hold is released once queueing it took this long...
CHUNK_SAMPLES = 64  # ...or it holds this many samples (CUDA queues about 1000 commands a stream)
HOLD_SOURCE = r"""
extern "C" __global__ void fsr_hold(const volatile long long* release, long long ticket, int* expired,
                                    unsigned long long timeout_ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (*release < ticket) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > timeout_ns) {
            *expired = 1;
            return;
        }
        __nanosleep(200);
    }
}
"""


FLUSH_READ_SOURCE = r"""
extern "C" __global__ void fsr_flush_read(const uint4* p, long long n, unsigned* sink) {
    uint4 acc = make_uint4(0, 0, 0, 0);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const uint4 v = p[i];
        acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
    if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u) *sink = 1;  // the loads are used
}
"""


class ReadKernel:
    """FLUSH_READ_SOURCE's kernel: reads a buffer (a multiple of 16 bytes) once, writing nothing
    (the sink is never written). The flush's second half and the read-rate probe."""

    def __init__(self):
        self.kernel = cp.RawKernel(FLUSH_READ_SOURCE, "fsr_flush_read")
        self.sink = cp.zeros(1, dtype=cp.uint32)
        self.grid = (cp.cuda.Device().attributes["MultiProcessorCount"] * 8,)

    def __call__(self, buffer: cp.ndarray, stream: cp.cuda.Stream) -> None:
        self.kernel(self.grid, (256,), (buffer, np.int64(buffer.nbytes // 16), self.sink), stream=stream)


class Flush(Protocol):
    """What timing asks of a flush: queue it on the stream, before a sample's start event."""

    def flush(self, stream: cp.cuda.Stream) -> None:
        """Queue the flush on `stream`."""


class L2Flusher:
    """Before every sample: writes a buffer twice the L2 size, then reads it back, so no sample
    starts with its inputs in cache and the L2 it starts with holds clean lines only.

    A write alone leaves the L2 full of dirty lines, which the timed kernel then writes back to
    DRAM as it evicts them, inside its timed region, by an amount that varies from run to run: on
    an H200 an 8 MB streaming kernel read 8.2 or 8.6-8.9 us from loop to loop behind a memset,
    7.42-7.55 us behind the memset and the read (docs/benchmarks/2026-11-23-throughput.md, the flush
    study). A read alone left some lines of the last sample's outputs in place (its loops read 7.3
    or 8.0 us). Lines a kernel loaded under an `L2::evict_last` policy can outlast it:
    certification flushes with fsr.evaluate.gpu.evict.EvictingFlush instead."""

    def __init__(self, l2_bytes: int):
        self.buffer = cp.empty(max(2 * l2_bytes, 8 << 20) // 16 * 16, dtype=cp.uint8)
        self.count = 0
        self.read = ReadKernel()

    def flush(self, stream: cp.cuda.Stream) -> None:
        self.count += 1
        cp.cuda.runtime.memsetAsync(self.buffer.data.ptr, self.count & 0xFF, self.buffer.nbytes, stream.ptr)
        self.read(self.buffer, stream)


class Hold:
    """Holds a stream until the host lets go: `hold` queues a kernel that spins on a counter in
    pinned host memory (read by the GPU over the bus) until it reaches its ticket; `release`
    writes the ticket. A hold not released within HOLD_TIMEOUT_S lets go by itself and marks its
    slot expired, so a host that stalls (or a callable that waits on the stream) costs a
    dropped sample, never a deadlock."""

    def __init__(self, slots: int = 1024):
        self.memory = cp.cuda.alloc_pinned_memory(8)
        self.counter = ctypes.c_longlong.from_address(self.memory.ptr)
        self.counter.value = 0
        self.ticket = 0
        self.expired = cp.zeros(slots, dtype=cp.int32)
        self.kernel = cp.RawKernel(HOLD_SOURCE, "fsr_hold")

    def hold(self, stream: cp.cuda.Stream, slot: int) -> int:
        """Queue a hold on `stream`; its ticket for `release`. `slot` < len(expired)."""
        self.ticket += 1
        self.kernel((1,), (1,), (np.uint64(self.memory.ptr), np.int64(self.ticket),
                                 np.uint64(self.expired.data.ptr + 4 * slot),
                                 np.uint64(int(HOLD_TIMEOUT_S * 1e9))), stream=stream)
        return self.ticket

    def release(self, ticket: int) -> None:
        self.counter.value = ticket

    def reset(self, stream: cp.cuda.Stream) -> None:
        """Clear the expiry marks (before a new series of samples)."""
        cp.cuda.runtime.memsetAsync(self.expired.data.ptr, 0, self.expired.nbytes, stream.ptr)

    def expired_slots(self, count: int) -> np.ndarray:
        """Expiry marks of slots [0, count) (the stream must have finished)."""
        return self.expired[:count].get().astype(bool)


Hook = Callable[[int], None]


def _nothing(_: int) -> None:
    pass


def _one(run: Hook, i: int, stream: cp.cuda.Stream, flusher: Flush,
         hold: Hold | None, prepare: Hook, events: tuple[cp.cuda.Event, cp.cuda.Event] | None, slot: int,
         after: Hook = _nothing) -> None:
    """Queue one sample: (hold,) `prepare`, flush, start event, `run(i)`, end event, `after`, (release)."""
    ticket = hold.hold(stream, slot) if hold is not None else 0
    _queue(run, i, stream, flusher, prepare, events, after)
    if hold is not None:
        hold.release(ticket)


def _queue(run: Hook, i: int, stream: cp.cuda.Stream, flusher: Flush, prepare: Hook,
           events: tuple[cp.cuda.Event, cp.cuda.Event] | None, after: Hook = _nothing) -> None:
    """`prepare(i)` (resetting the run's buffers) comes before the flush, so the lines it wrote
    are out of the L2 when the sample starts, as a checked launch's are not in it either;
    `after(i)` (checking the run's outputs) after the end event, outside the timed region."""
    prepare(i)
    flusher.flush(stream)
    if events is not None:
        events[0].record(stream)
    run(i)
    if events is not None:
        events[1].record(stream)
    after(i)


def warm_up(run: Hook, stream: cp.cuda.Stream, flusher: Flush, *, warmup_s: float,
            hold: Hold | None = None, prepare: Hook = _nothing, min_runs: int = 2,
            after: Hook = _nothing) -> tuple[float, bool]:
    """Run until `warmup_s` has passed (at least `min_runs` times, two at least): the wall time per run, and
    whether holding works for `run` (False when a hold expired: `run` waits on the stream). The
    first run is not held: a library's first call may allocate, and an allocation may wait for
    the whole device."""
    _one(run, 0, stream, flusher, None, prepare, None, 0, after)
    stream.synchronize()
    if hold is not None:
        hold.reset(stream)
    start = time.perf_counter()
    n = 1
    while n < max(min_runs, 2) or time.perf_counter() - start < warmup_s:
        _one(run, n, stream, flusher, hold, prepare, None, 0, after)
        stream.synchronize()
        n += 1
    per_run = (time.perf_counter() - start) / (n - 1)
    held = hold is not None and not hold.expired_slots(1)[0]
    return per_run, held


def timed(run: Hook, stream: cp.cuda.Stream, flusher: Flush, count: int, *,
          hold: Hold | None = None, prepare: Hook = _nothing, first: int = 0,
          after: Hook = _nothing) -> list[float]:
    """`count` samples (device microseconds), runs `first`..`first + count - 1`. With `hold`,
    they are queued in chunks, each held until it is all queued and queued after the last has
    run (the GPU waits while the host queues, never the reverse); the samples of a chunk whose
    hold expired (the host stalled: host time may be inside them) are dropped unless that would
    leave fewer than half."""
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(count)]
    if hold is None:
        for k, pair in enumerate(events):
            _queue(run, first + k, stream, flusher, prepare, pair, after)
        stream.synchronize()
        return [cp.cuda.get_elapsed_time(b, e) * 1000.0 for b, e in events]
    hold.reset(stream)
    chunks: list[tuple[int, int]] = []  # [begin, end) of each chunk, in slot order
    k = 0
    while k < count:
        if chunks:  # the last chunk has run: nothing is queued while a timed sample runs
            stream.synchronize()
        ticket = hold.hold(stream, len(chunks) % len(hold.expired))
        began, end = time.perf_counter(), k
        while end < count and end - k < CHUNK_SAMPLES and (end == k or time.perf_counter() - began < CHUNK_QUEUE_S):
            _queue(run, first + end, stream, flusher, prepare, events[end], after)
            end += 1
        hold.release(ticket)
        chunks.append((k, end))
        k = end
    stream.synchronize()
    times = [cp.cuda.get_elapsed_time(b, e) * 1000.0 for b, e in events]
    if len(chunks) > len(hold.expired):
        return times
    expired = hold.expired_slots(len(chunks))
    kept = [t for (b, e), bad in zip(chunks, expired, strict=True) if not bad for t in times[b:e]]
    return kept if 2 * len(kept) >= count else times


def median_error(samples: list[float]) -> float:
    """The standard error of the median relative to the median: 1.2533 sigma / sqrt(n), sigma
    from the median absolute deviation (robust to the odd slow sample); inf below 3 samples."""
    if len(samples) < 3:
        return float("inf")
    values = np.asarray(samples, dtype=np.float64)
    median = float(np.median(values))
    sigma = 1.4826 * float(np.median(np.abs(values - median)))
    return 1.2533 * sigma / np.sqrt(len(values)) / median if median > 0 else float("inf")


def clearly_slower(samples: list[float], best_us: float) -> bool:
    """Whether `samples` already show a median clearly slower than `best_us`: the median less
    RACE_Z of its standard errors (median_error) is still more than RACE_MARGIN past `best_us`.
    With RACE_Z = 3 the median is below that bound with about 0.1% probability where its
    sampling error is normal; RACE_MARGIN keeps a candidate near the best timed in full."""
    if len(samples) < 3:
        return False
    median = float(np.median(np.asarray(samples, dtype=np.float64)))
    return median * (1.0 - RACE_Z * median_error(samples)) > best_us * (1.0 + RACE_MARGIN)


def sample(run: Hook, stream: cp.cuda.Stream, flusher: Flush, *, budget_s: float,
           min_samples: int, max_samples: int, warmup_s: float,
           before: Hook | None = None, hold: Hold | None = None,
           rel_error: float = 0.0, per_run_s: float | None = None, after: Hook = _nothing) -> list[float]:
    """`raced` without a best to race against (the docstring is there)."""
    samples, _ = raced(run, stream, flusher, budget_s=budget_s, min_samples=min_samples, max_samples=max_samples,
                       warmup_s=warmup_s, before=before, hold=hold, rel_error=rel_error, per_run_s=per_run_s,
                       after=after)
    return samples


def raced(run: Hook, stream: cp.cuda.Stream, flusher: Flush, *, budget_s: float,
          min_samples: int, max_samples: int, warmup_s: float,
          before: Hook | None = None, hold: Hold | None = None,
          rel_error: float = 0.0, per_run_s: float | None = None, after: Hook = _nothing,
          race_us: float | None = None) -> tuple[list[float], bool]:
    """Device microseconds of `run(i)` (i picks the input set), one sample per flushed run.

    Warm-up runs until `warmup_s` has passed (at least twice), which also estimates the time per
    run; then samples until `budget_s` would be spent, clamped to [min_samples, max_samples],
    taken in rounds (min_samples, then doubling) that stop early once the median's relative
    standard error is below `rel_error` (0: never early). `before(i)` runs outside the timed
    region, before the flush (resetting the run's buffers); `after(i)` after it (checking its
    outputs). With `hold`, each sample's launches are all queued before the
    GPU starts it (unless `run` itself waits on the stream: then samples are taken without
    holding).

    `per_run_s`: the time per run, known when these launches have just run (a tuning trial's
    samples of a candidate's launches, which never wait on the stream): then there is no warm-up.
    The trial's samples themselves are not counted: taken one or two a hold, an 8 us kernel's
    read 3-11% faster than the protocol's chunks on an H200.

    `race_us` (racing): the best median the caller knows of; between rounds, samples that are
    already `clearly_slower` than it end the timing. Returns the samples and whether they were
    cut short so."""
    prepare = before or _nothing
    if per_run_s is not None:
        held = hold is not None
    else:
        per_run_s, held = warm_up(run, stream, flusher, warmup_s=warmup_s, hold=hold, prepare=prepare, after=after)
    count = int(min(max(budget_s / max(per_run_s, 1e-6), min_samples), max_samples))
    use = hold if held else None
    samples = timed(run, stream, flusher, min(count, min_samples), hold=use, prepare=prepare, after=after)
    while len(samples) < count and not (rel_error > 0 and median_error(samples) < rel_error):
        if race_us is not None and clearly_slower(samples, race_us):
            return samples, True
        more = min(count - len(samples), len(samples))
        samples += timed(run, stream, flusher, more, hold=use, prepare=prepare, first=len(samples), after=after)
    return samples, False


def sample_trial(run: Hook, stream: cp.cuda.Stream, flusher: Flush, *, budget_s: float,
                 max_samples: int, best_us: float | None, stop_ratio: float, cut_ratio: float,
                 before: Hook | None = None, hold: Hold | None = None, after: Hook = _nothing) -> list[float]:
    """The short protocol for tuning trials of a program just checked (so warm): samples up to
    `max_samples` or `budget_s` of device time (one at least: a kernel of half the budget or
    more is timed once), stopped after one when it is `cut_ratio` times slower than `best_us`
    (far from the winner: the noise is a few percent) or after two whose fastest is
    `stop_ratio` times slower (clearly not the winner). The winner is timed again with
    `sample`, without a warm-up. `run` must not wait on the stream (a candidate's launches)."""
    prepare = before or _nothing
    samples = timed(run, stream, flusher, 1, hold=hold, prepare=prepare, after=after)
    count = int(min(budget_s / max(samples[0] * 1e-6, 1e-6), max_samples))
    if count <= 1 or (best_us is not None and samples[0] > cut_ratio * best_us):
        return samples
    samples += timed(run, stream, flusher, 1, hold=hold, prepare=prepare, first=1, after=after)
    if count <= 2 or (best_us is not None and min(samples) > stop_ratio * best_us):
        return samples
    return samples + timed(run, stream, flusher, count - 2, hold=hold, prepare=prepare, first=2, after=after)
