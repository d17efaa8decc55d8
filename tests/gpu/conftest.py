"""The evaluator the GPU tests of this folder share: one per session (per pytest-xdist worker),
since preparing every task at its benchmark size costs minutes of host work (float64 references of
8192^3 products and 4096-token attention) that one evaluator pays once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fsr import tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.types import WorkerSpec
from tests.support.xdist_gpus import host_threads, shared_budget

if TYPE_CHECKING:
    from fsr.evaluate.evaluator import GpuEvaluator


@pytest.fixture(scope="session")
def bench_evaluator(contents_dir: Path) -> Iterator[GpuEvaluator]:
    """Every task at its benchmark size, no tuning, torch.compile off (no test that uses it reads
    torch.compile's figure; the library and PyTorch eager are timed as ever); a task's contents
    built when a test first needs it, through the session's contents cache (a set another worker
    built is read, not built again). Not warmed from the start: under `-n auto` eight or sixteen
    workers each reading every task's sets at once kept a worker's first test waiting minutes
    (219 s for maxpool2d's baseline on two H200s). Under a spread -n its tests run by task
    (tests/support/xdist_gpus.py BY_TASK), so a worker prepares each of its tasks once for all of
    them. For tests that judge kernels meant to be right: a kernel that crashed or hung would
    restart its child (the adversarial corpus has an evaluator of its own)."""
    from fsr.evaluate.evaluator import GpuEvaluator

    every = [tasks.load(n) for n in tasks.list_tasks()]
    config = Config(eval=EvalConfig(torch_compile="off", host_threads=host_threads(), prepared_max_bytes=shared_budget(),
                                    contents_cache_dir=str(contents_dir)),
                    tune=TuneConfig(trials=0))
    ev = GpuEvaluator(WorkerSpec.of(config, every))
    ev.device()  # its child starts, and measures the device's ceilings, while no test runs a kernel
    yield ev
    ev.close()


