"""The scrub of shared and local memory certification runs before every launch sequence, so no
launch finds what an earlier one left there (docs/judge.md, "Two tiers").

A block's shared memory and a thread's local memory start with whatever the last block or
thread on that part of the SM left: a kernel can leave partial results there with a marker and,
on a later launch, find them again at block start (the SM id is refused by the static rules, but
a grid of one wave lands its blocks where they landed before often enough). Two kernels
overwrite both with a pattern drawn afresh for every scrub:

- `fsr_scrub_shared`: two blocks per SM, each with the largest dynamic shared memory a block can
  opt in to (the whole carveout: one block fills an SM), every word written;
- `fsr_scrub_local<WORDS>`: two waves of blocks at full occupancy over every SM, each thread
  writing a local array of at least the candidate's own frame (1 KiB at least, the default
  per-thread stack), so every thread slot's frame is overwritten.

Runs in the evaluator's child process only (imports cupy).
"""

from __future__ import annotations

import functools
import secrets

import cupy as cp
import numpy as np

SOURCE = r"""
extern "C" __global__ void fsr_scrub_shared(unsigned int pattern, unsigned int words) {
    extern __shared__ unsigned int fsr_smem[];
    volatile unsigned int* smem = fsr_smem;
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x) smem[i] = pattern;
}

// volatile: every store is made, to local memory (the array is indexed at run time)
template <int WORDS>
__global__ void fsr_scrub_local(unsigned int pattern, unsigned int* sink) {
    volatile unsigned int frame[WORDS];
    for (int i = 0; i < WORDS; ++i) frame[i] = pattern ^ i;
    if (frame[pattern % WORDS] == 0xFFFFFFFFu && pattern == 0u) *sink = 1;  // never: keeps the frame live
}
"""
FRAMES = (1024, 4096, 16384, 65536)  # local frame sizes compiled, bytes per thread
LOCAL_BLOCK = 256
SHARED_BLOCK = 1024
WAVES = 2  # blocks for two full waves: every SM gets its share however the first lands


def frame_bytes(local_bytes: int) -> int:
    """The scrub's frame for a candidate whose kernels use `local_bytes` of local memory a
    thread: the smallest compiled frame that covers it (the largest past all of them)."""
    return next((f for f in FRAMES if f >= local_bytes), FRAMES[-1])


@functools.cache
def _module() -> cp.RawModule:
    names = tuple(f"fsr_scrub_local<{f // 4}>" for f in FRAMES)
    return cp.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=names)


@functools.cache
def _device() -> tuple[int, int, int]:
    """(SMs, threads a SM holds, largest dynamic shared memory a block can opt in to)."""
    attributes = cp.cuda.Device().attributes
    return (attributes["MultiProcessorCount"], attributes["MaxThreadsPerMultiProcessor"],
            attributes["MaxSharedMemoryPerBlockOptin"])


@functools.cache
def _shared_kernel() -> cp.RawKernel:
    kernel = _module().get_function("fsr_scrub_shared")
    kernel.max_dynamic_shared_size_bytes = _device()[2]
    return kernel


@functools.cache
def _sink() -> cp.ndarray:
    return cp.zeros(1, dtype=cp.uint32)


def scrub(stream: cp.cuda.Stream, local_bytes: int) -> None:
    """Queue the scrub of every SM's shared memory and every thread slot's local frame (at least
    `local_bytes`) on `stream`."""
    sms, threads, smem = _device()
    pattern = np.uint32(secrets.randbits(32))
    _shared_kernel()((WAVES * sms,), (SHARED_BLOCK,), (pattern, np.uint32(smem // 4)), shared_mem=smem,
                     stream=stream)
    local = _module().get_function(f"fsr_scrub_local<{frame_bytes(local_bytes) // 4}>")
    local((WAVES * sms * (threads // LOCAL_BLOCK),), (LOCAL_BLOCK,), (pattern, _sink()), stream=stream)
