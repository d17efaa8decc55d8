"""The evaluator the GPU tests of this folder share: one per session (per pytest-xdist worker),
since preparing every task at its benchmark size costs minutes of host work (float64 references of
8192^3 products and 4096-token attention) that one evaluator pays once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from fsr import tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.types import WorkerSpec
from tests.support.xdist_gpus import host_threads

if TYPE_CHECKING:
    from fsr.evaluate.evaluator import GpuEvaluator


@pytest.fixture(scope="session")
def bench_evaluator() -> Iterator[GpuEvaluator]:
    """Every task at its benchmark size, no tuning, torch.compile off (no test that uses it reads
    torch.compile's figure; the library and PyTorch eager are timed as ever); every task's contents
    built in the background from its start, in the order the tests take the tasks. For tests that
    judge kernels meant to be right: a kernel that crashed or hung would restart its child, and the
    new child would build every task's contents again (the adversarial corpus has an evaluator of
    its own)."""
    from fsr.evaluate.evaluator import GpuEvaluator

    every = [tasks.load(n) for n in tasks.list_tasks()]
    config = Config(eval=EvalConfig(torch_compile="off", host_threads=host_threads()), tune=TuneConfig(trials=0))
    ev = GpuEvaluator(WorkerSpec.of(config, every, warm=True))
    ev.device()  # its child starts, and measures the device's ceilings, while no test runs a kernel
    yield ev
    ev.close()
