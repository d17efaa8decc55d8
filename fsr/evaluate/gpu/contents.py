"""A GPU child's host-side benchmark contents: each task's input sets and their float64 references,
built once on host threads and kept within a host-memory budget, apart from the device state
built from them (fsr.evaluate.gpu.resident holds that within the GPU's budget).

Building a task's contents costs seconds of host work (the float64 references of a benchmark
size); uploading them costs a fraction of one. So a task the device budget dropped is prepared
again by an upload from here, not by a rebuild, and a campaign of more tasks than fit on the GPU
does not rebuild every task at every visit. The campaign's tasks (`warm`, in the order the search
will want them) are built in the background from the child's start, a few at a time on the
worker's share of the host's cores, while the GPU evaluates the tasks already built; a task whose
turn has not come is built at once when it is asked for. Warming stops at the host budget: a
campaign of hundreds of tasks builds the rest when they are asked for.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from fsr.evaluate import host
from fsr.evaluate.gpu.inputs import Content
from fsr.evaluate.gpu.resident import Resident, footprint
from fsr.types import Task

log = logging.getLogger(__name__)

HOST_SHARE = 0.4  # of the host's memory, split by the worker's share of its cores: contents kept


def host_budget_bytes(configured: int, host_threads: int) -> int:
    """The contents' host budget: `configured` bytes, or 0 for HOST_SHARE of the host's memory
    times this worker's share of its cores (`host_threads` of cpu_count)."""
    if configured:
        return configured
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # not a POSIX host: a modest default
        memory = 32 * 2**30
    cores = host.cores()
    return int(memory * HOST_SHARE * min(1.0, max(1, host_threads) / cores))


class HostContents:
    """Tasks' benchmark contents by name, built by `build`, the least recently used dropped past
    `budget_bytes`. Thread-safe: the builder's threads and the child's request loop share it."""

    def __init__(self, build: Callable[[Task], list[Content]], budget_bytes: int):
        self._build = build
        self._held: Resident[list[Content]] = Resident(budget_bytes)
        self._building: dict[str, Future[list[Content]]] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._asked: ThreadPoolExecutor | None = None

    @property
    def held_bytes(self) -> int:
        return self._held.held_bytes

    def warm(self, tasks: Sequence[Task], at_once: int) -> None:
        """Build `tasks` in the background, in order, `at_once` at a time; a build whose turn comes
        once the budget is full is left for `get` (a campaign larger than the host's memory)."""
        if not tasks:
            return
        self._pool = ThreadPoolExecutor(max(1, at_once), thread_name_prefix="contents")
        with self._lock:
            for task in tasks:
                if task.name not in self._held and task.name not in self._building:
                    self._building[task.name] = self._pool.submit(self._warm_one, task)
        self._pool.shutdown(wait=False)

    def idle(self) -> bool:
        """Whether no build is under way or queued (warming, or asked for)."""
        with self._lock:
            return all(future.done() for future in self._building.values())

    def ensure(self, task: Task) -> bool:
        """Whether `get(task)` would answer at once; if not, its build is started in the background
        (first in line) unless one is under way, so the caller can use the GPU meanwhile."""
        with self._lock:
            if task.name in self._held:
                return True
            future = self._building.get(task.name)
            skipped = future is not None and future.done() and future.exception() is None and not future.result()
            if future is None or skipped:  # none, or skipped at the budget: build it now, in the background
                self._building[task.name] = self._urgent().submit(self._build_kept, task)
                return False
            return future.done()  # a build that failed is done: `get` raises its error where it is prepared

    def _urgent(self) -> ThreadPoolExecutor:
        """A pool for builds asked for now, beside the warming one (which may be busy with others)."""
        if self._asked is None:
            self._asked = ThreadPoolExecutor(1, thread_name_prefix="contents-asked")
        return self._asked

    def get(self, task: Task) -> tuple[list[Content], float]:
        """The task's contents (now the most recently used), and the seconds this call waited for
        them: 0 when held; a build in flight is waited for; one not started yet, or none, is
        built now, on this thread."""
        started = time.perf_counter()
        with self._lock:
            held = self._held.get(task.name)
            future = self._building.pop(task.name, None)
        if held is not None:
            return held, 0.0
        contents = future.result() if future is not None and not future.cancel() else []
        if not contents:  # not started, or skipped at the budget: build it here
            contents = self._build(task)
        with self._lock:
            dropped = self._held.add(task.name, contents)
        if dropped:
            log.info("host contents of %s dropped for %s (%.1f GiB held)", ", ".join(dropped), task.name,
                     self._held.held_bytes / 2**30)
        return contents, time.perf_counter() - started

    def _warm_one(self, task: Task) -> list[Content]:
        """A background build: empty (left for `get`) once the held contents fill the budget."""
        with self._lock:
            full = self._held.held_bytes >= self._held.budget_bytes
        return [] if full else self._build_kept(task)

    def _build_kept(self, task: Task) -> list[Content]:
        """Build the task's contents and hold them, unless `get` has taken the build meanwhile."""
        contents = self._build(task)
        with self._lock:
            if self._building.get(task.name) is not None:  # not yet taken by `get`: keep it now
                self._building.pop(task.name)
                self._held.add(task.name, contents)
        log.info("contents of %s built (%.1f GiB)", task.name, footprint(contents) / 2**30)
        return contents
