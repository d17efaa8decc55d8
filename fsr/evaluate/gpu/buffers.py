"""Device buffers between canary regions, poisoned before every launch.

Every buffer a kernel sees sits between two canary regions, so a write past either end is caught
even where the memory pool would have absorbed it silently; outputs and scratch are poisoned with
NaN bytes before every launch, so an element the kernel never writes cannot pass.

In certification (`without_slack`) a buffer's allocation is a whole number of 2 MiB pages and its
end canary runs to the allocation's end: the bytes the memory pool's rounding and the driver's page
would leave past the end canary (where a kernel could keep something from run to run) are canary
too, written before and checked after as the rest.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator
from dataclasses import dataclass

import cupy as cp
import numpy as np

from fsr import candidate as cfmt
from fsr import dtypes, tasks
from fsr.types import Candidate, Task

PAD_BYTES = 64 * 1024  # canary region on each side; a multiple of 256 keeps buffers aligned
CANARY = 0x5A
PAGE_BYTES = 2 << 20  # the driver's allocation granularity for large buffers
SLACK = "in its allocation's slack, past the end canary"
POISON = 0xFF  # all-ones bytes: NaN for every float dtype fsr has (fp8 e4m3fn's one NaN too), -1 for integers


_without_slack = contextvars.ContextVar("fsr_without_slack", default=False)


@contextlib.contextmanager
def without_slack() -> Iterator[None]:
    """Within it (this thread), every Guarded is allocated in whole pages, its end canary running
    to the allocation's end (certification)."""
    token = _without_slack.set(True)
    try:
        yield
    finally:
        _without_slack.reset(token)


class Guarded:
    """A device array between two canary regions. `dtype` is the buffer's own (bfloat16, say);
    `array` holds it as CuPy can (fsr.dtypes.device_dtype: bfloat16 and fp8 as unsigned integers
    of their width), and `host()` copies it back as `dtype`."""

    def __init__(self, shape: tuple[int, ...], dtype: str):
        self.dtype = dtypes.numpy_dtype(dtype)
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * self.dtype.itemsize
        total = self.nbytes + 2 * PAD_BYTES
        if _without_slack.get():
            total = -(-total // PAGE_BYTES) * PAGE_BYTES
        self.raw = cp.empty(total, dtype=cp.uint8)
        self.tail_bytes = total - PAD_BYTES - self.nbytes  # the end canary: PAD_BYTES, or to the allocation's end
        self.raw[:PAD_BYTES].fill(CANARY)
        self.raw[PAD_BYTES + self.nbytes:].fill(CANARY)
        self.array = self.raw[PAD_BYTES:PAD_BYTES + self.nbytes].view(dtypes.device_dtype(dtype)).reshape(shape)

    @classmethod
    def from_host(cls, host: np.ndarray) -> Guarded:
        g = cls(host.shape, host.dtype.name)
        g.array.set(np.ascontiguousarray(host).view(g.array.dtype))
        return g

    def host(self) -> np.ndarray:
        """The buffer's elements on the host, as its own dtype."""
        return dtypes.host_view(self.array.get(), self.dtype.name)

    def fill(self, byte: int) -> None:
        self.raw[PAD_BYTES:PAD_BYTES + self.nbytes].fill(byte)

    def canaries_intact(self) -> bool:
        return bool((self.raw[:PAD_BYTES] == CANARY).all() & (self.raw[PAD_BYTES + self.nbytes:] == CANARY).all())


@dataclass
class Buffers:
    """Every named buffer of one launch sequence at one size."""

    inputs: dict[str, Guarded]
    outputs: dict[str, Guarded]
    scratch: dict[str, Guarded]

    def all(self) -> dict[str, Guarded]:
        return self.inputs | self.outputs | self.scratch

    def reset(self, cand: Candidate) -> None:
        """Poison outputs; poison or zero scratch as the candidate declared."""
        for g in self.outputs.values():
            g.fill(POISON)
        for s in cand.scratch:
            self.scratch[s.name].fill(0 if s.zero else POISON)


def make_buffers(task: Task, cand: Candidate, sizes: dict[str, int], host_inputs: dict[str, np.ndarray]) -> Buffers:
    outputs = {a.name: Guarded(tasks.shape_of(task, a, sizes), a.dtype) for a in task.outputs}
    return Buffers(inputs={a.name: Guarded.from_host(host_inputs[a.name]) for a in task.inputs},
                   outputs=outputs, scratch=scratch_buffers(cand, sizes))


def scratch_buffers(cand: Candidate, sizes: dict[str, int]) -> dict[str, Guarded]:
    counts = cfmt.scratch_counts(cand, sizes)
    return {s.name: Guarded((max(counts[s.name], 1),), s.dtype) for s in cand.scratch}


def damage(buf: Buffers, host_inputs: dict[str, np.ndarray]) -> str:
    """Why the buffers show a kernel wrote where it may not ("" if they do not): an input
    changed, or a canary region next to a buffer (all canaries checked by one kernel)."""
    for name, g in buf.inputs.items():
        if not np.array_equal(g.array.get(), np.ascontiguousarray(host_inputs[name]).view(g.array.dtype)):
            return f"input {name} was modified (inputs are read-only)"
    broken = broken_canaries(buf.all())
    return f"wrote outside buffer {broken[0]} (canary region changed)" if broken else ""


CANARY_SOURCE = r"""
// regions[r]: region r's start; regions[count + r]: its length in bytes
extern "C" __global__ void fsr_canaries(const unsigned long long* regions, int count, int value, int* bad) {
    int r = blockIdx.y;
    if (r >= count) return;
    const unsigned char* p = (const unsigned char*)regions[r];
    const long long bytes = (long long)regions[count + r];
    for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += gridDim.x * blockDim.x)
        if (p[i] != (unsigned char)value) bad[r] = 1;
}
"""


@functools.cache
def _canary_kernel() -> cp.RawKernel:
    return cp.RawKernel(CANARY_SOURCE, "fsr_canaries")


def broken_canaries(buffers: dict[str, Guarded]) -> list[str]:
    """Names of the buffers with a changed canary region, in order ("NAME, in its allocation's
    slack ..." where only the bytes past a certification buffer's first PAD_BYTES of end canary
    changed); one kernel over every region on the current stream and one copy back."""
    regions: list[tuple[str, int, int]] = []  # (name, start, bytes)
    for name, g in buffers.items():
        end = g.raw.data.ptr + PAD_BYTES + g.nbytes
        regions += [(name, g.raw.data.ptr, PAD_BYTES), (name, end, PAD_BYTES)]
        if g.tail_bytes > PAD_BYTES:
            regions.append((f"{name}, {SLACK}", end + PAD_BYTES, g.tail_bytes - PAD_BYTES))
    if not regions:
        return []
    bad = cp.zeros(len(regions), dtype=cp.int32)
    table = np.array([start for _, start, _ in regions] + [size for _, _, size in regions], dtype=np.uint64)
    _canary_kernel()((8, len(regions)), (256,), (cp.asarray(table), np.int32(len(regions)), np.int32(CANARY), bad))
    flags = bad.get()
    return list(dict.fromkeys(regions[i][0] for i in range(len(regions)) if flags[i]))
