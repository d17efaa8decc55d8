"""Tasks' baseline kernels compiled ahead, off the GPU's turns.

A task's first preparation times its baseline kernel (the speedups' basis) while the evaluator
holds the GPU child, so a compile there kept every other candidate off the GPU, behind the compile
processes' queue of tuning trials. A campaign's worker compiles its tasks' baselines as soon as
its GPU child has said which architecture to compile for, and a call about to prepare a task waits
for that compile before it takes its turn; the preparation then finds the program in the compile
service's memory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import CancelledError, Executor, Future

from fsr import candidate as cfmt
from fsr.evaluate.compile import CompileService
from fsr.evaluate.static import Static, static_stage
from fsr.types import Task


class BaselineCompiles:
    """Each task's baseline compile, started once on `pool` and kept by task name; `ahead`: the
    tasks whose baselines `start` compiles, in order (a campaign's)."""

    def __init__(self, pool: Executor, compiler: CompileService, ahead: Sequence[Task] = ()):
        self._pool, self._compiler, self._ahead = pool, compiler, tuple(ahead)
        self._started: dict[str, Future[Static]] = {}
        self._lock = threading.Lock()  # the evaluator's calls run on several threads

    def start(self, arch: str) -> None:
        """Compile the `ahead` tasks' baselines (those that have one) in the background."""
        for task in self._ahead:
            self._future(task, arch)

    def wait(self, task: Task, arch: str) -> float:
        """Seconds spent waiting for the task's baseline compile (started now if it was not); a
        baseline that does not compile is left for the preparation to report."""
        started = time.perf_counter()
        future = self._future(task, arch)
        if future is not None:
            try:
                future.exception()  # waits; what failed is met again, and reported, where it is timed
            except CancelledError:  # the evaluator is closing
                pass
        return time.perf_counter() - started

    def _future(self, task: Task, arch: str) -> Future[Static] | None:
        if not task.baseline_source.strip():  # none: speedups read against PyTorch eager
            return None
        with self._lock:
            future = self._started.get(task.name)
            if future is None:
                future = self._started[task.name] = self._pool.submit(self._compile, task, arch)
            return future

    def _compile(self, task: Task, arch: str) -> Static:
        return static_stage(cfmt.parse(task.baseline_source, task), task, arch, self._compiler)
