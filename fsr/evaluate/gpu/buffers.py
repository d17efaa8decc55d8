"""Device buffers between canary regions, poisoned before every launch.

Every buffer a kernel sees sits between two canary regions, so a write past either end is caught
even where the memory pool would have absorbed it silently; outputs and scratch are poisoned with
NaN bytes before every launch, so an element the kernel never writes cannot pass.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import cupy as cp
import numpy as np

from fsr import candidate as cfmt
from fsr import dtypes, tasks
from fsr.types import Candidate, Task

PAD_BYTES = 64 * 1024  # canary region on each side; a multiple of 256 keeps buffers aligned
CANARY = 0x5A
POISON = 0xFF  # all-ones bytes: NaN for every float dtype fsr has (fp8 e4m3fn's one NaN too), -1 for integers


class Guarded:
    """A device array between two canary regions. `dtype` is the buffer's own (bfloat16, say);
    `array` holds it as CuPy can (fsr.dtypes.device_dtype: bfloat16 and fp8 as unsigned integers
    of their width), and `host()` copies it back as `dtype`."""

    def __init__(self, shape: tuple[int, ...], dtype: str):
        self.dtype = dtypes.numpy_dtype(dtype)
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * self.dtype.itemsize
        self.raw = cp.empty(self.nbytes + 2 * PAD_BYTES, dtype=cp.uint8)
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
extern "C" __global__ void fsr_canaries(const unsigned long long* starts, int regions, int bytes,
                                        int value, int* bad) {
    int r = blockIdx.y;
    if (r >= regions) return;
    const unsigned char* p = (const unsigned char*)starts[r];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += gridDim.x * blockDim.x)
        if (p[i] != (unsigned char)value) bad[r] = 1;
}
"""


@functools.cache
def _canary_kernel() -> cp.RawKernel:
    return cp.RawKernel(CANARY_SOURCE, "fsr_canaries")


def broken_canaries(buffers: dict[str, Guarded]) -> list[str]:
    """Names of the buffers with a changed canary region, in order; one kernel over every
    region on the current stream and one copy back (a buffer's regions: before, after)."""
    names = list(buffers)
    starts = [p for g in buffers.values() for p in (g.raw.data.ptr, g.raw.data.ptr + PAD_BYTES + g.nbytes)]
    if not starts:
        return []
    bad = cp.zeros(len(starts), dtype=cp.int32)
    _canary_kernel()((8, len(starts)), (256,), (cp.asarray(np.array(starts, dtype=np.uint64)),
                                                  np.int32(len(starts)), np.int32(PAD_BYTES), np.int32(CANARY), bad))
    flags = bad.get()
    return list(dict.fromkeys(names[i // 2] for i in range(len(starts)) if flags[i]))
