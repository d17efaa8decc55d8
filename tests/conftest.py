"""Shared test set-up: `gpu` tests skip cleanly on machines without a CUDA device; compiled
programs are cached in a temporary folder, never in the real ~/.cache; `compiler` is a compile
service for the tests that compile."""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fsr.evaluate.compile import CompileService


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


@pytest.fixture(scope="session", autouse=True)
def compile_cache_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """$XDG_CACHE_HOME for the session, set before any other fixture starts a process, so every
    process the tests start (GPU children, Ray workers, `fsr` commands) keeps its default compile
    cache under a temporary folder."""
    home = tmp_path_factory.mktemp("xdg-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(home))
        yield home


@pytest.fixture
def compiler(compile_cache_home: Path) -> Iterator[CompileService]:
    """A compile service for trusted test code: NVRTC in this process, with the node's disk cache
    in the session's temporary folder."""
    from fsr.evaluate import compile_cache
    from fsr.evaluate.compile import CompileService

    disk = compile_cache.open_cache("")
    assert disk is not None and disk.root.is_relative_to(compile_cache_home)
    service = CompileService(disk)
    yield service
    service.close()
