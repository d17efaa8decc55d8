"""Certification's scrub kernels (fsr.evaluate.gpu.scrub) compiled here, without a GPU: each local
frame as large as it says (so it covers a candidate's frame up to that size), registers few enough
for full occupancy (every thread slot of every SM), the shared scrub a plain kernel."""

from __future__ import annotations

import subprocess

import pytest

pytest.importorskip("cupy")

from fsr.evaluate.gpu import scrub  # noqa: E402

FULL_OCCUPANCY_REGISTERS = 32  # 65536 registers an SM over 2048 threads


def ptxas_report(tmp_path) -> str:
    names = "".join(f"template __global__ void fsr_scrub_local<{f // 4}>(unsigned int, unsigned int*);\n"
                    for f in scrub.FRAMES)
    source = tmp_path / "scrub.cu"
    source.write_text(scrub.SOURCE + names)
    try:
        done = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-std=c++17", "-Xptxas", "-v", str(source), "-o",
                               str(tmp_path / "scrub.cubin")], capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        pytest.skip("no nvcc")
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_each_local_frame_is_its_size_and_the_kernels_run_at_full_occupancy(tmp_path):
    report = ptxas_report(tmp_path)
    for frame in scrub.FRAMES:
        assert f"{frame} bytes stack frame, 0 bytes spill stores" in report, report
    registers = [int(line.split("Used ")[1].split(" registers")[0]) for line in report.splitlines() if "Used " in line]
    assert registers and max(registers) <= FULL_OCCUPANCY_REGISTERS, report


def test_the_frame_covers_the_candidate_s():
    assert scrub.frame_bytes(0) == 1024 and scrub.frame_bytes(1024) == 1024
    assert scrub.frame_bytes(1025) == 4096 and scrub.frame_bytes(20000) == 65536
    assert scrub.frame_bytes(10**6) == scrub.FRAMES[-1]


def test_the_scrub_compiles_with_nvrtc_as_the_child_compiles_it():
    from tests.support.kernels import cubin

    names = "".join(f"template __global__ void fsr_scrub_local<{f // 4}>(unsigned int, unsigned int*);\n"
                    for f in scrub.FRAMES)
    assert cubin(scrub.SOURCE + names)[:4] == b"\x7fELF"


def test_the_canary_check_over_regions_of_any_length_compiles():
    """Certification's buffers have end canaries up to a page long (gpu.buffers.without_slack):
    the canary kernel takes each region's length."""
    from fsr.evaluate.gpu import buffers
    from tests.support.kernels import cubin

    assert cubin(buffers.CANARY_SOURCE)[:4] == b"\x7fELF"
    assert buffers.PAGE_BYTES % 512 == 0 and buffers.PAD_BYTES < buffers.PAGE_BYTES
