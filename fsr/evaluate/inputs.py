"""The GPU child's per-task state: fresh inputs and float64 references for the test sizes (made
ahead on a thread), and the benchmark input sets on the device, which every timing rotates
through. Runs in the evaluator's child process only (imports cupy).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cupy as cp
import cupyx
import numpy as np

from fsr import tasks
from fsr.evaluate.verify import Buffers, Expected, Program, enqueue, expect, plan, scratch_buffers
from fsr.types import Candidate, Task

Content = tuple[dict[str, np.ndarray], dict[str, Expected]]  # inputs, and the expected outputs


def make_content(task: Task, module: Any, dtypes: dict[str, str], size: dict[str, int],
                 rng: np.random.Generator) -> Content:
    """Fresh inputs at one size and the reference's outputs for them (the reference gets copies:
    it may not change what the kernel will see)."""
    inputs = module.make_inputs(dict(size), rng)
    reference = module.reference({k: v.copy() for k, v in inputs.items()}, dict(size))
    return inputs, {k: expect(v, dtypes[k], task.atol, task.rtol) for k, v in reference.items()}


@dataclass
class BenchSet:
    """Device buffers at the benchmark size, and which of the task's benchmark contents they hold."""

    buffers: Buffers
    content: int


@dataclass
class TaskState:
    """A task prepared in the child: its input pool, its benchmark contents and their device
    sets, and pinned host arrays that outputs at the benchmark size come back through."""

    task: Task
    pool: InputPool
    contents: list[Content] = field(default_factory=list)
    sets: list[BenchSet] = field(default_factory=list)
    pinned: dict[str, np.ndarray] = field(default_factory=dict)

    def landing(self, name: str, like: cp.ndarray) -> np.ndarray:
        """A pinned host array for output `name` at the benchmark size (copies back at full
        bus speed; pageable memory is staged through a bounce buffer)."""
        if name not in self.pinned:
            self.pinned[name] = cupyx.empty_pinned(like.shape, like.dtype)
        return self.pinned[name]


class InputPool:
    """Fresh inputs and references for every test size, made ahead by a thread so the host's
    reference work overlaps the GPU's. Each item is used once."""

    def __init__(self, task: Task, seed: int, depth: int = 2):
        self.task = task
        self.sizes = task.test_sizes
        self.depths = [depth] * len(task.test_sizes)
        self.module = tasks.functions(task)
        self.items: list[list[Content]] = [[] for _ in self.sizes]
        self.cond = threading.Condition()
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, int(task.content_hash, 16)]))
        threading.Thread(target=self._fill, daemon=True, name=f"inputs-{task.name}").start()

    def make(self, size: dict[str, int], rng: np.random.Generator) -> Content:
        return make_content(self.task, self.module, {a.name: a.dtype for a in self.task.outputs}, size, rng)

    def take(self, index: int) -> Content:
        with self.cond:
            while not self.items[index]:
                self.cond.wait()
            item = self.items[index].pop(0)
            self.cond.notify_all()
            return item

    def _fill(self) -> None:
        while True:
            with self.cond:
                while all(len(q) >= d for q, d in zip(self.items, self.depths, strict=True)):
                    self.cond.wait()
                index = min(range(len(self.items)), key=lambda i: len(self.items[i]) / self.depths[i])
            item = self.make(dict(self.sizes[index]), self.rng)
            with self.cond:
                self.items[index].append(item)
                self.cond.notify_all()


def bench_launches(state: TaskState, cand: Candidate, program: Program, stream: cp.cuda.Stream
                   ) -> tuple[Callable[[int], None], Callable[[int], None]]:
    """For timing at the benchmark size: `run(i)` queues the candidate's launches on benchmark
    set i (rotating through the sets), `before(i)` clears its zeroed scratch buffers (outside the
    timed region). Raises LaunchRefused."""
    size = dict(state.task.bench_size)
    scratch = scratch_buffers(cand, size)
    plans = [plan(program, cand, state.task, size,
                  {k: g.array for k, g in (s.buffers.inputs | s.buffers.outputs | scratch).items()})
             for s in state.sets]
    zeroed = [scratch[s.name] for s in cand.scratch if s.zero]

    def run(i: int) -> None:
        enqueue(plans[i % len(plans)], stream)

    def before(_: int) -> None:
        for g in zeroed:
            cp.cuda.runtime.memsetAsync(g.array.data.ptr, 0, g.nbytes, stream.ptr)

    return run, before


def no_scratch(task: Task) -> Candidate:
    return Candidate(task=task.name, source="", launches=())
