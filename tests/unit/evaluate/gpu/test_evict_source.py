"""Certification's flush (fsr.evaluate.gpu.evict) without a GPU: its kernels compile with NVRTC for
Hopper and keep the priority instructions they exist for; the demote kernel's table and grid
cover every line of every region. On the GPU: tests/gpu/test_certify_l2.py."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("cupy")

from fsr.evaluate.gpu import evict  # noqa: E402


def ptx(source: str, arch: str = "sm_90") -> str:
    from cupy_backends.cuda.libs import nvrtc

    prog = nvrtc.createProgram(source, "evict.cu", [], [])
    try:
        nvrtc.compileProgram(prog, [f"-arch=compute_{arch[3:]}"])
        return nvrtc.getPTX(prog).decode()
    finally:
        nvrtc.destroyProgram(prog)


def test_the_flush_kernels_assemble_for_hopper():
    from tests.support.kernels import cubin

    assert cubin(evict.SOURCE)[:4] == b"\x7fELF"  # ptxas accepts applypriority and the cache-hinted load


def test_the_demote_kernel_sets_lines_back_to_normal_and_the_read_asks_for_evict_last():
    text = ptx(evict.SOURCE)
    demote = text[text.index(".entry fsr_demote"):text.index(".entry fsr_flush_read_last")]
    read = text[text.index(".entry fsr_flush_read_last"):]
    assert re.search(r"applypriority\.global\.L2::evict_normal\s*\[%rd\d+\], 128;", demote), demote
    assert "createpolicy.fractional.L2::evict_last.b64" in read and "ld.global.L2::cache_hint.v4.u32" in read
    assert "applypriority" not in read and "cache_hint" not in demote


def test_the_table_rounds_each_region_out_to_whole_lines():
    table = evict.region_table([(1 << 20, 100), (3 << 20, 256), (5 << 20, 129)])
    assert table.tolist() == [1 << 20, 3 << 20, 5 << 20, (1 << 20) + 128, (3 << 20) + 256, (5 << 20) + 256]
    assert evict.region_table([]).size == 0


def test_the_grid_covers_the_largest_region_one_row_a_region():
    sms = 132
    small = [(0, 128), (1 << 20, 4 << 20)]  # 32768 lines: 128 blocks of 256 threads, one line each
    assert evict.demote_grid(small, sms) == (128, 2)
    huge = [(0, 100 << 20)]  # more lines than 8 blocks a SM hold: the kernel strides
    assert evict.demote_grid(huge, sms) == (8 * sms, 1)
    assert evict.demote_grid([], sms) == (1, 1)


def test_the_flush_sets_the_candidate_s_lines_back_before_it_evicts_and_its_own_after(monkeypatch):
    """The order is the defence: a hinted line set back after the write and the read would still
    be there; the flush buffer's lines left at evict_last would crowd the sample's own. The device
    calls are recorded here, in the order they are queued."""

    queued: list[tuple] = []

    def kernel(name):
        def launch(grid, block, args, stream):
            first = args[0]
            queued.append((name, grid, first.tolist() if isinstance(first, np.ndarray) else first.data.ptr))

        return launch

    module = SimpleNamespace(get_function=kernel)
    runtime = SimpleNamespace(deviceGetLimit=lambda limit: 64 << 20, CUDARuntimeError=RuntimeError,
                              deviceSetLimit=lambda limit, value: queued.append(("limit", limit, value)),
                              memsetAsync=lambda ptr, value, size, stream: queued.append(("memset", ptr, size)))
    device = SimpleNamespace(attributes={"MultiProcessorCount": 132}, synchronize=lambda: None)
    fake = SimpleNamespace(asarray=np.asarray, zeros=np.zeros, uint32=np.uint32,
                           cuda=SimpleNamespace(Device=lambda: device, runtime=runtime))
    monkeypatch.setattr(evict, "cp", fake)
    monkeypatch.setattr(evict, "_module", lambda: module)
    buffer = SimpleNamespace(data=SimpleNamespace(ptr=1 << 30), nbytes=100 << 20)
    plain = SimpleNamespace(buffer=buffer, count=0)
    flush = evict.EvictingFlush(plain, [(1 << 20, 4 << 20), (8 << 20, 4 << 20)])
    assert queued == [("limit", evict.PERSISTING_L2_LIMIT, 0)]  # no set-aside for hinted lines to live in
    flush.flush(SimpleNamespace(ptr=7))
    names = [q[0] for q in queued[1:]]
    assert names == ["fsr_demote", "memset", "fsr_flush_read_last", "fsr_demote"]
    assert queued[1][2] == [1 << 20, 8 << 20, 5 << 20, 12 << 20]  # the candidate's regions first
    assert queued[2][1:] == (1 << 30, 100 << 20) and queued[3][2] == 1 << 30  # the flush buffer written, read
    assert queued[4][2] == [1 << 30, (1 << 30) + (100 << 20)]  # then every line of it set back
    assert plain.count == 1
