"""Local and shared memory scrubbed before every launch sequence, checked or timed.

Per-thread local memory (the stack) and shared memory are not cleared between launches: a thread
that lands in the same warp slot of the same SM as a thread of an earlier launch finds what that
thread left in its local memory, and a block finds the shared memory an earlier block left. A
kernel could keep a stash there from run to run (the SM id makes the placement repeatable) and
compute less when it finds one. Before every launch sequence, outside the timed region and before
the L2 flush, fsr runs a kernel that occupies every warp slot of every SM, each thread writing
garbage over a local frame at least as large as the candidate's (and the context's stack size),
each block over its share of the SM's shared memory; what the candidate then finds is garbage
whose values change every time.

Cost (an estimate, to be measured): a 1 KiB frame on an H100 is 132 SMs x 2048 threads x 1 KiB =
277 MB of local stores plus 30 MB of shared stores, about 0.1 ms per sample at the device's write
rate; a candidate with a larger stack pays in proportion. It runs outside the timed region, so it
costs evaluation time per sample, never the kernel's measured time.

Runs in the evaluator's child process only (imports cupy).
"""

from __future__ import annotations

import functools
import secrets

import cupy as cp
import numpy as np

from fsr.evaluate.gpu.programs import Program

BLOCKS_PER_SM = 2  # two blocks of half an SM's threads: every warp slot, and each half of the shared memory
MIN_FRAME_BYTES = 256

SCRUB_SOURCE = r"""
template <int WORDS>
__global__ void __launch_bounds__(1024, 2) fsr_scrub(unsigned int seed, int smem_words) {
    extern __shared__ unsigned int fsr_scrub_smem[];
    const unsigned int x = (seed ^ (blockIdx.x * blockDim.x + threadIdx.x)) * 0x9e3779b9u;
    for (int i = threadIdx.x; i < smem_words; i += blockDim.x) fsr_scrub_smem[i] = x ^ (i * 0x85ebca6bu);
    unsigned int frame[WORDS];  // stored through its address in asm: the compiler cannot drop a store
    #pragma unroll 1
    for (int i = 0; i < WORDS; ++i)
        asm volatile("st.volatile.u32 [%0], %1;" : : "l"(frame + i), "r"(x + i * 0xc2b2ae35u) : "memory");
}
"""


def frame_bytes(local_bytes: int, stack_limit: int) -> int:
    """The scrub's local frame for a candidate whose kernels use `local_bytes` of local memory
    a thread, in a context whose stack limit is `stack_limit`: the larger, rounded up to a power
    of two, at least MIN_FRAME_BYTES."""
    need = max(local_bytes, stack_limit, MIN_FRAME_BYTES)
    return 1 << (need - 1).bit_length()


@functools.cache
def _kernel(words: int) -> cp.RawKernel:
    name = f"fsr_scrub<{words}>"
    module = cp.RawModule(code=SCRUB_SOURCE, options=("-std=c++17",), name_expressions=(name,))
    return module.get_function(name)


@functools.cache
def _shape() -> tuple[int, int, int]:
    """(blocks, threads a block, shared bytes a block) that fill every SM of this device."""
    attributes = cp.cuda.Device().attributes
    threads = min(1024, attributes["MaxThreadsPerMultiProcessor"] // BLOCKS_PER_SM)
    reserved = attributes.get("ReservedSharedMemoryPerBlock", 1024)
    smem = attributes["MaxSharedMemoryPerMultiprocessor"] // BLOCKS_PER_SM - reserved
    smem = min(smem, attributes["MaxSharedMemoryPerBlockOptin"]) // 16 * 16
    return attributes["MultiProcessorCount"] * BLOCKS_PER_SM, threads, smem


@functools.cache
def _stack_limit() -> int:
    return int(cp.cuda.runtime.deviceGetLimit(cp.cuda.runtime.cudaLimitStackSize))


def scrub(program: Program, stream: cp.cuda.Stream) -> None:
    """Queue the scrub on `stream`: garbage over the local memory of every warp slot (a frame
    at least the candidate's) and over every SM's shared memory."""
    words = frame_bytes(program.local_bytes(), _stack_limit()) // 4
    kernel = _kernel(words)
    blocks, threads, smem = _shape()
    if kernel.max_dynamic_shared_size_bytes < smem:
        kernel.max_dynamic_shared_size_bytes = smem
    kernel((blocks,), (threads,), (np.uint32(secrets.randbits(32)), np.int32(smem // 4)),
           shared_mem=smem, stream=stream)
