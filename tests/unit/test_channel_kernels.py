"""The device code of the channel defences, without a GPU. The scrub kernel (fsr.evaluate.gpu.scrub):
its frame covers the candidate's local memory and the context's stack, and what NVRTC makes of it
really stores every word of its frame to local memory and fills shared memory (a frame the
compiler could drop scrubs nothing). The L2 flush (gpu.timing.FLUSH_LAST_SOURCE) compiles to
loads at the evict_last priority and a pass putting the lines back to normal, and queues both
before its write and plain read of the buffer."""

from __future__ import annotations

import re

import pytest

from fsr.evaluate.compile import parse_resources
from fsr.evaluate.gpu import scrub, timing


@pytest.mark.parametrize("local,stack,frame", [(0, 1024, 1024), (1500, 1024, 2048), (0, 0, 256), (4096, 1024, 4096),
                                               (70000, 1024, 131072)])
def test_the_frame_covers_the_candidates_stack_and_the_contexts(local, stack, frame):
    assert scrub.frame_bytes(local, stack) == frame


@pytest.mark.parametrize("words", [64, 256, 4096])
def test_the_compiled_scrub_stores_its_whole_frame_and_the_shared_memory(words):
    from cupy_backends.cuda.libs import nvrtc

    name = f"fsr_scrub<{words}>"
    prog = nvrtc.createProgram(scrub.SCRUB_SOURCE, "scrub.cu", [], [])
    try:
        nvrtc.addNameExpression(prog, name)
        nvrtc.compileProgram(prog, ["--gpu-architecture=sm_90", "-Xptxas=-v", "--std=c++17"])
        log, ptx = nvrtc.getProgramLog(prog), nvrtc.getPTX(prog).decode()
        lowered = nvrtc.getLoweredName(prog, name)
    finally:
        nvrtc.destroyProgram(prog)
    resources = parse_resources(log)[lowered]
    assert resources.stack_bytes == 4 * words and resources.spill_bytes == 0
    assert resources.registers <= 32  # two blocks of 1024 threads on every SM
    assert re.search(r"st\.volatile\.u32", ptx) and re.search(r"st\.shared\.u32", ptx)


def test_the_flush_reads_at_the_high_priority_and_puts_lines_back_to_normal():
    from cupy_backends.cuda.libs import nvrtc

    prog = nvrtc.createProgram(timing.FLUSH_LAST_SOURCE, "flush.cu", [], [])
    try:
        nvrtc.compileProgram(prog, ["--gpu-architecture=sm_90"])
        ptx = nvrtc.getPTX(prog).decode()
    finally:
        nvrtc.destroyProgram(prog)
    assert "createpolicy.fractional.L2::evict_last" in ptx
    assert re.search(r"ld\.global\.L2::cache_hint\.v4\.u32", ptx)
    assert "applypriority.global.L2::evict_normal" in ptx


def test_the_flush_ends_with_the_write_and_the_plain_read(monkeypatch):
    """The priority work (evict_last read, demotion) comes first; the last work queued before a
    sample's start event is the plain read of the whole buffer, after a write of it, as in the
    flush the timing tests were measured with: nothing of the demotion is the last kernel before
    the timed region."""
    queued: list[tuple[str, int]] = []

    class Recorder:
        def __init__(self, name: str):
            self.name = name

        def __call__(self, grid, block, args, stream=None):
            queued.append((self.name, int(args[1])))

    class Buffer:
        nbytes = 1 << 27

        class data:
            ptr = 4096

    flusher = object.__new__(timing.L2Flusher)
    flusher.buffer, flusher.count, flusher.grid, flusher.sink = Buffer(), 0, (1,), None
    flusher.read_last, flusher.demote = Recorder("read_last"), Recorder("demote")
    flusher.read = lambda buffer, stream: queued.append(("read", buffer.nbytes))  # ReadKernel: whole buffer
    monkeypatch.setattr(timing.cp.cuda.runtime, "memsetAsync",
                        lambda ptr, value, nbytes, stream: queued.append(("memset", nbytes)))

    class Stream:
        ptr = 0

    flusher.flush(Stream())
    assert queued == [("read_last", Buffer.nbytes // 16), ("demote", Buffer.nbytes // 128),
                      ("memset", Buffer.nbytes), ("read", Buffer.nbytes)]
