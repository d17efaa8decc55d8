"""Certification's flush (fsr.evaluate.gpu.evict) without a GPU: its kernels compile with NVRTC for
Hopper and keep the priority instructions they exist for; the demote kernel's table and grid
cover every line of every region, and the flush sets them back before the ordinary flush. On the GPU: tests/gpu/test_certify_l2.py."""

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


def test_the_demote_kernel_sets_lines_back_to_normal_and_loads_nothing():
    demote = ptx(evict.SOURCE)
    assert re.search(r"applypriority\.global\.L2::evict_normal\s*\[%rd\d+\], 128;", demote), demote
    assert "cache_hint" not in demote
    assert "evict_last" not in demote  # a flush of protected lines crowded honest kernels' own (evict.py)


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


def test_the_flush_sets_the_candidate_s_lines_back_before_it_evicts(monkeypatch):
    """The order is the defence: a hinted line set back after the ordinary flush would still be
    there. The device calls are recorded here, in the order they are queued."""

    queued: list[tuple] = []

    def kernel(name):
        def launch(grid, block, args, stream):
            first = args[0]
            queued.append((name, grid, first.tolist() if isinstance(first, np.ndarray) else first.data.ptr))

        return launch

    module = SimpleNamespace(get_function=kernel)
    runtime = SimpleNamespace(deviceGetLimit=lambda limit: 64 << 20, CUDARuntimeError=RuntimeError,
                              deviceSetLimit=lambda limit, value: queued.append(("limit", limit, value)))
    device = SimpleNamespace(attributes={"MultiProcessorCount": 132}, synchronize=lambda: None)
    fake = SimpleNamespace(asarray=np.asarray, cuda=SimpleNamespace(Device=lambda: device, runtime=runtime))
    monkeypatch.setattr(evict, "cp", fake)
    monkeypatch.setattr(evict, "_module", lambda: module)
    plain = SimpleNamespace(flush=lambda stream: queued.append(("plain flush", stream.ptr)))
    flush = evict.EvictingFlush(plain, [(1 << 20, 4 << 20), (8 << 20, 4 << 20)])  # type: ignore[arg-type]
    assert queued == [("limit", evict.PERSISTING_L2_LIMIT, 0)]  # no set-aside for hinted lines to live in
    flush.flush(SimpleNamespace(ptr=7))
    assert [q[0] for q in queued[1:]] == ["fsr_demote", "plain flush"]
    assert queued[1][2] == [1 << 20, 8 << 20, 5 << 20, 12 << 20]  # the candidate's regions, then the ordinary flush
    assert queued[2] == ("plain flush", 7)
