"""Certification's L2 flush: one that lines kept by eviction-priority hints do not survive
(docs/judge.md, "Two tiers").

The ordinary flush (timing.L2Flusher) writes and reads a buffer twice the L2's size at the default
priority. A kernel can load its inputs under an `L2::evict_last` policy (`createpolicy` and
`ld.global.L2::cache_hint`), and such lines are the last the L2 evicts: they can outlast a flush
at normal priority, and the next timed run reads its inputs from the L2 while its honest twin
reads them from memory. So certification flushes in two steps, each queued on fsr's stream:

1. every 128-byte line of every buffer the timed launches receive (inputs, outputs and scratch,
   canaries included) set back to `evict_normal` (`applypriority`, which changes a resident
   line's priority and loads nothing): the hinted lines lose their protection;
2. the ordinary flush, whose lines then displace them as any others.

A flush that also read its own buffer under an `evict_last` policy, to outrank hinted lines
elsewhere, slowed honest kernels on an H200, most likely by leaving the L2 full of its own
protected lines (setting them back did not seem to free them): an honest histogram, which lives
on L2 atomics, timed 2.2x slower certified than screened. The candidate can hint only lines of the buffers it is given, which step 1 covers.

The device's set-aside for persisting accesses (the one part of the L2 a host call could reserve
for such lines; a kernel cannot) is kept at 0, the driver's default, while certifying.

Runs in the evaluator's child process only (imports cupy).
"""

from __future__ import annotations

import functools
import logging

import cupy as cp
import numpy as np

from fsr.evaluate.gpu.timing import L2Flusher

log = logging.getLogger(__name__)

LINE_BYTES = 128  # applypriority's one size
PERSISTING_L2_LIMIT = 0x06  # cudaLimitPersistingL2CacheSize

SOURCE = r"""
// regions[r]: region r's first byte; regions[count + r]: one past its last. Each 128-byte line
// the region touches is set back to the default priority (a line not in the L2 is left alone).
extern "C" __global__ void fsr_demote(const unsigned long long* regions, int count) {
    const int r = blockIdx.y;
    if (r >= count) return;
    const unsigned long long first = regions[r] & ~127ull, end = regions[count + r];
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x * 128ull;
    for (unsigned long long a = first + (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) * 128ull;
         a < end; a += step)
        asm volatile("applypriority.global.L2::evict_normal [%0], 128;" :: "l"(__cvta_generic_to_global((void*)a))
                     : "memory");
}
"""
BLOCK = 256


@functools.cache
def _module() -> cp.RawModule:
    return cp.RawModule(code=SOURCE)


def region_table(regions: list[tuple[int, int]]) -> np.ndarray:
    """The demote kernel's table for (device address, bytes) regions: every start, then every end
    (one past the last byte, rounded up to a whole line: the allocator hands out whole lines)."""
    starts = [address for address, _ in regions]
    ends = [-(-(address + size) // LINE_BYTES) * LINE_BYTES for address, size in regions]
    return np.array(starts + ends, dtype=np.uint64)


def demote_grid(regions: list[tuple[int, int]], sms: int) -> tuple[int, int]:
    """Blocks of the demote kernel: enough for the largest region's lines, at most 8 a SM, by
    one row per region."""
    lines = max((-(-size // LINE_BYTES) for _, size in regions), default=1)
    return max(1, min(-(-lines // BLOCK), 8 * sms)), max(1, len(regions))


def no_set_aside() -> None:
    """The device's L2 set-aside for persisting accesses at 0 (the driver's default): fsr never
    reserves one, and certification does not time a candidate beside one reserved by anything else.
    A device that has no such limit (MIG, MPS) has none to reserve."""
    try:
        if cp.cuda.runtime.deviceGetLimit(PERSISTING_L2_LIMIT):
            cp.cuda.runtime.deviceSetLimit(PERSISTING_L2_LIMIT, 0)
    except cp.cuda.runtime.CUDARuntimeError as e:
        log.info("the persisting L2 set-aside is not settable here: %s", e)


class EvictingFlush:
    """The flush before each certification sample (timing.Flush): `regions` (device address,
    bytes) are every buffer the timed launches receive; `plain` lends its buffer and its count."""

    def __init__(self, plain: L2Flusher, regions: list[tuple[int, int]]):
        no_set_aside()
        self.plain = plain
        sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        self._mine = (cp.asarray(region_table(regions)), np.int32(len(regions)), demote_grid(regions, sms))
        # compiled (or loaded from CuPy's cache) now, not while a chunk of samples is being queued
        self._demote_kernel = _module().get_function("fsr_demote")
        cp.cuda.Device().synchronize()  # the table was uploaded on the default stream

    def flush(self, stream: cp.cuda.Stream) -> None:
        """Queue the two steps on `stream` (the module's docstring)."""
        self._demote(self._mine, stream)
        self.plain.flush(stream)

    def _demote(self, table: tuple[cp.ndarray, np.int32, tuple[int, int]], stream: cp.cuda.Stream) -> None:
        regions, count, grid = table
        if count:
            self._demote_kernel(grid, (BLOCK,), (regions, count), stream=stream)
