"""Without a usable CUDA device fsr says why in its own words, in one line: no driver, no
visible device, or a driver too old, never the CUDA runtime's "driver version is insufficient"
for a machine that has no driver at all."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fsr import commands
from fsr.no_device import explain
from tests.support.paths import ROOT

INSUFFICIENT = RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA "
                            "runtime version")


def test_no_driver_is_said_so_not_as_an_old_driver():
    said = explain(INSUFFICIENT, driver_version=lambda: 0)
    assert said == "no NVIDIA driver on this machine"


def test_a_driver_too_old_names_both_versions():
    said = explain(INSUFFICIENT, driver_version=lambda: 12040, runtime_version=lambda: 13020)
    assert said == ("the NVIDIA driver supports CUDA 12.4, older than the CUDA 13.2 runtime fsr uses: "
                    "a newer driver is needed")


def test_no_visible_device_names_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    said = explain(RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected"),
                   driver_version=lambda: 13000)
    assert said == "no CUDA device is visible (CUDA_VISIBLE_DEVICES='')"


def test_other_errors_come_as_they_are():
    assert explain(ValueError("boom"), driver_version=lambda: 0) == "ValueError: boom"


def fsr(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fsr", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=180, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})


@pytest.mark.parametrize("args", [("eval", "softmax", "examples/softmax_fast.cu"),
                                  ("run", "softmax", "--local", "--max-evaluations", "1")])
def test_without_a_device_eval_and_run_local_say_why_in_one_line(tmp_path, args):
    extra = ("--runs-dir", str(tmp_path / "runs")) if args[0] == "run" else ()
    out = fsr(*args, *extra)
    assert out.returncode == commands.EXIT_NO_DEVICE, out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert "no NVIDIA driver" in out.stderr or "no CUDA device is visible" in out.stderr, out.stderr
    assert "insufficient" not in out.stderr


def test_without_a_device_eval_rejects_a_module_over_the_bound():
    """The 16 KiB bound on module variables is read from the cubin on the host: a 16 MiB
    __device__ array is REJECTED before fsr looks for a GPU (it once compiled, then exited 3)."""
    out = fsr("eval", "softmax", "tests/adversarial/softmax/device_array_16mib.cu")
    assert out.returncode not in (0, commands.EXIT_NO_DEVICE), out.stderr
    assert "REJECTED" in out.stdout + out.stderr and "16777216 bytes" in out.stdout + out.stderr, out.stdout + out.stderr
