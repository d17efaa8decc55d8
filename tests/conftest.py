"""Shared test set-up: `gpu` tests skip cleanly on machines without a CUDA device; under
pytest-xdist, `-n auto` starts a few workers per visible GPU and pins each worker to one GPU, a
module's tests stay on one worker unless it is one of the heaviest, cut into runs for several
(tests/support/xdist_gpus.py), and `whole_machine` tests skip where other workers run beside them;
compiled programs are cached in a temporary folder, never in the real ~/.cache; `compiler` is a
compile service for the tests that compile."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support import warm_contents, xdist_gpus

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


SPREAD_DIST = "loadscope"  # what -n without --dist takes; its scheduler is xdist_gpus.scheduler


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Under pytest-xdist (-n) without a --dist of the command line's: a module's tests on one
    worker, so its evaluator (a GPU child, its tasks' contents) is built once, not once per worker;
    the heaviest modules cut into runs for several (xdist_gpus.SPREAD), handed out first.
    (pytest-xdist itself would take "no" for "load" next.)"""
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "dist", None) == "no":
        config.option.dist = SPREAD_DIST
        config.option.fsr_spread = True


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    """The controller's scheduler where pytest_cmdline_main chose the distribution."""
    if getattr(config.option, "fsr_spread", False):
        return xdist_gpus.scheduler(config, log)
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # type: ignore[no-untyped-def]
    """Tell each worker the distribution (a worker parses the command line again, where what
    pytest_cmdline_main set is not): it orders its items unit by unit."""
    node.workerinput["fsr_spread"] = getattr(node.config.option, "fsr_spread", False)


def order_for_xdist(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker of a spread distribution: the items unit by unit, the spread
    modules' runs first (xdist_gpus.in_unit_order); every worker orders alike, and the scheduler
    hands the units out in this order."""
    if not getattr(config, "workerinput", {}).get("fsr_spread"):
        return
    order = xdist_gpus.in_unit_order([item.nodeid for item in items], xdist_gpus.worker_count(os.environ))
    items[:] = [items[i] for i in order]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: a few workers per visible GPU, as the host's cores allow (xdist_gpus.per_gpu;
    pytest-xdist would count CPU cores); without a GPU one per core (xdist_gpus.auto_workers);
    with PYTEST_XDIST_AUTO_NUM_WORKERS set, pytest-xdist's own count."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return xdist_gpus.auto_workers(cuda_device_count())


def pytest_configure(config: pytest.Config) -> None:
    """In a pytest-xdist worker, before any test or fixture starts CUDA: this worker's GPU alone."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        devices = xdist_gpus.visible_devices(os.environ, cuda_device_count())
        device = xdist_gpus.worker_device(worker, devices)
        if device is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = device
            share = xdist_gpus.sharers(worker, xdist_gpus.worker_count(os.environ), devices)
            os.environ[xdist_gpus.SHARERS_ENV] = str(share)  # tests/gpu/conftest.py splits the device's memory


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected: the order of what runs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order_for_xdist(config, items)
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]  # a marker, not a keyword: tests/unit/evaluate/gpu/ is a folder named gpu
    if gpu_items and cuda_device_count() == 0:
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in gpu_items:
            item.add_marker(skip)
    if xdist_gpus.worker_count(os.environ) > 1:  # other workers' tests run beside this one's
        alone = pytest.mark.skip(reason="needs the machine to itself: run `pytest -m whole_machine` without -n")
        for item in items:
            if item.get_closest_marker("whole_machine"):
                item.add_marker(alone)


@pytest.fixture(scope="session", autouse=True)
def compile_cache_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """$XDG_CACHE_HOME for the session, set before any other fixture starts a process, so every
    process the tests start (GPU children, Ray workers, `fsr` commands) keeps its default compile
    cache under a temporary folder: one for every pytest-xdist worker of the session (entries are
    renamed into place, fsr.evaluate.compile_cache), so a program one worker compiled, another
    finds."""
    base = tmp_path_factory.getbasetemp()  # under pytest-xdist: one folder for every worker, as contents_dir
    home = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "xdg-cache"
    home.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(home))
        yield home


@pytest.fixture(scope="session")
def contents_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`eval.contents_cache_dir` for the GPU tests' evaluators that prepare tasks at their benchmark
    size: one folder for every pytest-xdist worker of the session (the workers' temporary folders
    share a parent), so a task's benchmark set and float64 references are built once a session, by
    the first worker to need them, and read by the others (fsr.evaluate.gpu.contents_cache)."""
    return warm_contents.session_folder(tmp_path_factory.getbasetemp(), os.environ)


@pytest.fixture(scope="session", autouse=True)
def warm_heavy_contents(request: pytest.FixtureRequest) -> None:
    """Under pytest-xdist, on a GPU host, where GPU tests use the session's contents cache: the
    heavy tasks' screening sets built in the background from the first worker's first test, on
    most of the host's cores (tests/support/warm_contents.py). Anywhere else nothing (no device,
    no GPU test selected, no xdist, any other worker). It ends when its sets are built."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    workers = xdist_gpus.worker_count(os.environ)
    if worker != "gw0" or workers < 2 or os.environ.get(warm_contents.STARTED_ENV):  # costs nothing elsewhere;
        return  # (or bench/gpu_check.py --warm-early started it before the session)
    if warm_contents.wanted(request.session.items, worker, workers, cuda_device_count()):
        warm_contents.start(request.getfixturevalue("contents_dir"))


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



