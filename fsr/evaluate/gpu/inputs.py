"""The GPU child's per-task state: fresh inputs and float64 references for the test sizes (made
ahead on a thread), and the benchmark input sets on the device, which every timing rotates
through, with their expected outputs. Runs in the evaluator's child process only (imports cupy).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import cupy as cp
import cupyx
import numpy as np

from fsr import tasks
from fsr.dtypes import Tolerance
from fsr.evaluate.gpu import contents_cache
from fsr.evaluate.gpu.buffers import Buffers
from fsr.evaluate.gpu.verify import Expected, expect
from fsr.types import Candidate, Stress, Task

Content = tuple[dict[str, np.ndarray], dict[str, Expected]]  # inputs, and the expected outputs


def make_content(task: Task, module: Any, dtypes: dict[str, str], size: dict[str, int],
                 rng: np.random.Generator, stress: Stress | None = None) -> Content:
    """Fresh inputs at one size and the reference's outputs for them (the reference gets copies:
    it may not change what the kernel will see), within the task's tolerance. With `stress` (at
    its own size): that stress set's inputs (fsr.tasks.stress_inputs: drawn as for the tests,
    the named floating-point inputs mapped to x * scale + offset) within the set's tolerance."""
    if stress is None:
        inputs = module.make_inputs(dict(size), rng)
        tasks.check_inputs(task, inputs, size)  # a kernel reads its buffers' bytes as declared
        tol = tasks.tolerance(task)
    else:
        inputs = tasks.stress_inputs(task, module, stress, rng)  # checked as declared there
        tol = Tolerance(stress.atol, stress.rtol, stress.floor)
    reference = module.reference({k: v.copy() for k, v in inputs.items()}, dict(size))
    return inputs, {k: expect(v, dtypes[k], tol) for k, v in reference.items()}


def screening_seeds(task: Task, seed: int, input_sets: int) -> list[np.random.SeedSequence]:
    """The seeds of a task's screening benchmark sets (at least two): children of one sequence
    drawn from `eval.seed` and the task's content hash, so every worker holds the same sets."""
    return np.random.SeedSequence([seed, 1, int(task.content_hash, 16)]).spawn(max(input_sets, 2))


def screening_key(task: Task, seed: np.random.SeedSequence) -> str:
    """The contents cache's key of the screening set drawn from `seed` (one of screening_seeds)."""
    dtypes = {a.name: a.dtype for a in task.outputs}
    return contents_cache.key((task.content_hash, seed.entropy, seed.spawn_key, sorted(dict(task.bench_size).items()),
                               sorted(dtypes.items()), repr(tasks.tolerance(task))))


def screening_contents(task: Task, seed: int, input_sets: int,
                       disk: contents_cache.ContentsCache | None) -> list[Content]:
    """The task's screening benchmark sets at its benchmark size with their references, one
    thread per set (NumPy releases the GIL in its array work; float64 references over the whole
    benchmark size are the largest host cost of a worker's start); with the node's contents cache
    (`disk`), each set is built once a node and read after that (fsr.evaluate.gpu.contents_cache)."""
    size, module, dtypes = dict(task.bench_size), tasks.functions(task), {a.name: a.dtype for a in task.outputs}

    def build(seq: np.random.SeedSequence) -> Content:
        return contents_cache.get(disk, screening_key(task, seq),
                                  lambda: make_content(task, module, dtypes, size, np.random.default_rng(seq)))

    seeds = screening_seeds(task, seed, input_sets)
    with ThreadPoolExecutor(len(seeds), thread_name_prefix=f"bench-{task.name}") as pool:
        return list(pool.map(build, seeds))


def stress_content(task: Task, stress: Stress, rng: np.random.Generator) -> Content:
    """The content of one of the task's stress sets (task.toml `[[stress]]`), at its size
    (docs/judge.md, "Stress sets")."""
    dtypes = {a.name: a.dtype for a in task.outputs}
    return make_content(task, tasks.functions(task), dtypes, dict(stress.size), rng, stress)


@dataclass
class BenchSet:
    """Device buffers at the benchmark size, which of the task's benchmark contents they hold,
    and that content's expected outputs on the device (every timed run's outputs are compared
    with them: fsr.evaluate.gpu.timed_runs)."""

    buffers: Buffers
    content: int
    expected: dict[str, Any] = field(default_factory=dict)  # output -> timed_runs.DeviceExpected
    fingerprints: list[int] = field(default_factory=list)  # of the inputs as uploaded: timed runs may not change them


@dataclass
class TaskState:
    """A task prepared in the child: its input pool, its benchmark contents and their device
    sets, and pinned host arrays that outputs at the benchmark size come back through."""

    task: Task
    pool: InputPool
    contents: list[Content] = field(default_factory=list)
    sets: list[BenchSet] = field(default_factory=list)
    pinned: dict[str, np.ndarray] = field(default_factory=dict)
    fresh: Any = None  # certification's inputs from entropy (fsr.evaluate.gpu.certify.Fresh), once started

    def close(self) -> None:
        """Drop the task's host and device arrays (back to CuPy's pools) and stop its input threads."""
        self.pool.stop()
        if self.fresh is not None:
            self.fresh.close()
        self.contents, self.sets, self.pinned = [], [], {}
        tasks.forget(self.task)  # and its module's caches (an imported task's comparator model)

    def landing(self, name: str, like: cp.ndarray) -> np.ndarray:
        """A pinned host array for output `name` at the benchmark size (copies back at full
        bus speed; pageable memory is staged through a bounce buffer)."""
        if name not in self.pinned:
            self.pinned[name] = cupyx.empty_pinned(like.shape, like.dtype)
        return self.pinned[name]


class InputPool:
    """Fresh inputs and references for every test size, made ahead by a thread so the host's
    reference work overlaps the GPU's. Each item is used once. Drawn in sequence from `seed` and
    the task's content hash; with `seeds` (certification's), each item from a seed of its own,
    `numpy.random.default_rng(seeds())`, kept with it so its inputs can be drawn again."""

    def __init__(self, task: Task, seed: int, depth: int = 2, seeds: Callable[[], int] | None = None):
        self.task = task
        self.sizes = task.test_sizes
        self.depths = [depth] * len(task.test_sizes)
        self.module = tasks.functions(task)
        self.items: list[list[tuple[int | None, Content]]] = [[] for _ in self.sizes]
        self.cond = threading.Condition()
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, int(task.content_hash, 16)]))
        self.seeds = seeds
        self.stopped = False
        self.error: Exception | None = None
        threading.Thread(target=self._fill, daemon=True, name=f"inputs-{task.name}").start()

    def stop(self) -> None:
        """End the filling thread (after the item it is making) and drop what it made."""
        with self.cond:
            self.stopped = True
            self.items = [[] for _ in self.sizes]
            self.cond.notify_all()

    def make(self, size: dict[str, int], rng: np.random.Generator) -> Content:
        return make_content(self.task, self.module, {a.name: a.dtype for a in self.task.outputs}, size, rng)

    def take(self, index: int) -> Content:
        """The next item at test size `index`; raises what making one raised (the thread ends)."""
        return self.take_seeded(index)[1]

    def take_seeded(self, index: int) -> tuple[int | None, Content]:
        """`take`'s item with the seed it was drawn from (None: drawn in the pool's sequence)."""
        with self.cond:
            while not self.items[index] and self.error is None:
                self.cond.wait()
            if not self.items[index]:
                raise self.error  # type: ignore[misc]  # not None: the loop ended
            item = self.items[index].pop(0)
            self.cond.notify_all()
            return item

    def _draw(self, size: dict[str, int]) -> tuple[int | None, Content]:
        if self.seeds is None:
            return None, self.make(size, self.rng)
        seed = self.seeds()
        return seed, self.make(size, np.random.default_rng(seed))

    def _fill(self) -> None:
        while True:
            with self.cond:
                while not self.stopped and all(len(q) >= d for q, d in zip(self.items, self.depths, strict=True)):
                    self.cond.wait()
                if self.stopped:
                    return
                index = min(range(len(self.items)), key=lambda i: len(self.items[i]) / self.depths[i])
            try:
                item = self._draw(dict(self.sizes[index]))
            except Exception as e:  # a task's fault: whoever takes an item gets it, rather than waiting forever
                with self.cond:
                    self.error = e
                    self.cond.notify_all()
                return
            with self.cond:
                if self.stopped:
                    return
                self.items[index].append(item)
                self.cond.notify_all()


class PoolsAhead:
    """Tasks' input pools started before their preparations (with their benchmark contents, from
    the GPU child's start), so a task's first checks find their inputs and float64 references
    made; each is taken once, by the task's next preparation, and a preparation that finds none
    starts its own. Both draw the same inputs: a pool's draws come from the task's seed alone."""

    def __init__(self, seed: int):
        self.seed = seed
        self._pools: dict[str, InputPool] = {}
        self._lock = threading.Lock()  # started on the contents' threads, taken on the request loop

    def start(self, task: Task) -> None:
        """Start filling the task's pool, unless one is waiting to be taken."""
        with self._lock:
            if task.name not in self._pools:
                self._pools[task.name] = InputPool(task, self.seed)

    def take(self, task: Task) -> InputPool:
        """The pool started for the task, else a new one."""
        with self._lock:
            pool = self._pools.pop(task.name, None)
        return pool or InputPool(task, self.seed)


def no_scratch(task: Task) -> Candidate:
    return Candidate(task=task.name, source="", launches=())
