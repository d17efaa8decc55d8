"""Shared test set-up: `gpu` tests skip cleanly on machines without a CUDA device."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest


@functools.cache
def cuda_device_count() -> int:
    """Asked in a subprocess so the test process itself never initialises CUDA."""
    code = "import cupy; print(cupy.cuda.runtime.getDeviceCount())"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        return int(out.stdout.strip() or 0) if out.returncode == 0 else 0
    except (subprocess.TimeoutExpired, ValueError, OSError):
        return 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and cuda_device_count() == 0:
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in gpu_items:
            item.add_marker(skip)
