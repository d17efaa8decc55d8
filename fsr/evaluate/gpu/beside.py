"""Comparators timed beside candidates: a thread of the GPU child compiles each prepared task's
torch.compile comparator while the child judges candidates, then times the library, PyTorch
eager and torch.compile under the child's GPU gate.

Compiling is host work (about half a minute for a child's first torch.compile, a second or two
a task after it): on the way to a task's first candidate it was most of a campaign's
preparation. Here it overlaps candidates; everything of the comparators' that runs on the GPU
while a candidate could be timed takes the gate first (the timing, and Inductor's autotuning
benchmarks while it compiles), so nothing of theirs shares the GPU with a timed candidate. The
compile's own first calls run on a stream of their own, outside fsr's timed queue. A task whose
comparators are pending is pinned in the child's prepared tasks (its buffers are read here).
Finished figures go to the parent before the reply of the request during which they finished
(wire.Compared), with the seconds their timing held the gate, which the parent charges as
preparing.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import cupy as cp

from fsr import tasks
from fsr.evaluate.gpu.comparators import Comparators
from fsr.evaluate.gpu.inputs import TaskState
from fsr.evaluate.gpu.programs import ContextLost
from fsr.evaluate.gpu.resident import Resident
from fsr.evaluate.wire import Compared
from fsr.torch_lock import torch_lock

log = logging.getLogger(__name__)

SWITCH_S = 2e-4  # Python's thread switch interval while torch.compile compiles here
GATE_POLL_S = 0.05  # how often a gated benchmark that waits checks whether it blocks the gate's holder


class Beside:
    """The comparator thread of one GPU child (started with its first task)."""

    def __init__(self, comparators: Comparators, gate: threading.RLock, prepared: Resident[TaskState],
                 torch_compile: str, torch_import: threading.Thread | None = None):
        """`torch_import`: the thread importing PyTorch since the child's start, waited for before
        any torch work here (a second import while the first runs can meet a half-made module)."""
        self._comparators, self._gate, self._prepared = comparators, gate, prepared
        self._torch_import = torch_import
        self._mode = None if torch_compile == "off" else torch_compile
        self._jobs: queue.SimpleQueue[tuple[str, TaskState]] = queue.SimpleQueue()
        self._done: list[Compared] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stream: cp.cuda.Stream | None = None

    def submit(self, name: str, state: TaskState) -> None:
        """Time `state`'s comparators soon; the caller holds the gate."""
        self._prepared.pin(name)
        self._jobs.put((name, state))
        if self._thread is None:
            self._stream = cp.cuda.Stream(non_blocking=True)
            self._thread = threading.Thread(target=self._serve, daemon=True, name="fsr-comparators")
            self._thread.start()

    def finished(self) -> tuple[Compared, ...]:
        """The figures finished since the last call."""
        with self._lock:
            done, self._done = self._done, []
        return tuple(done)

    def _serve(self) -> None:
        if self._torch_import is not None:
            self._torch_import.join()
        gate_inductor_benchmarks(self._gate)
        while True:
            name, state = self._jobs.get()
            try:
                compared = self._compare(name, state)
            except ContextLost:  # a candidate broke the context: the child's loop meets it too
                return
            except Exception as e:  # a missing comparator is never a verdict, nor the child's end
                log.warning("task %s: comparators not timed (%s: %s)", name, type(e).__name__, e)
                compared = Compared(name, None, None, None, None, 0.0, (f"comparators not timed ({type(e).__name__}: {e})",))
            finally:
                with self._gate:
                    self._prepared.unpin(name)
            with self._lock:
                self._done.append(compared)

    def _compare(self, name: str, state: TaskState) -> Compared:
        c = self._comparators
        has_torch = getattr(tasks.functions(state.task), "torch_eager", None) is not None
        compiled, compile_s = None, None
        if has_torch and self._mode is not None:
            assert self._stream is not None
            with short_switches():
                compiled, compile_s = c.torch_run(state, self._mode, self._stream)  # host work: no gate
        with both(self._gate):
            started = time.perf_counter()
            library_us = c.library_us(state) if state.task.has_library else None
            torch_us = c.pytorch_us(state, None)[0] if has_torch else None
            compiled_us = c.torch_median_us(state, compiled, self._mode) if compiled is not None and torch_us else None
            gpu_s = time.perf_counter() - started
        missed, c.missed[:] = tuple(c.missed), []
        return Compared(name, library_us, torch_us, compiled_us, compile_s if compiled_us else None, gpu_s, missed)


@contextlib.contextmanager
def short_switches(interval_s: float = SWITCH_S) -> Iterator[None]:
    """Python's thread switch interval shortened meanwhile: a compile holds the GIL in long
    stretches of Python, and the child's loop, which gives the GIL up at every wait on the GPU,
    would wait up to the default 5 ms for it each time (a candidate's dozens of waits took
    seconds beside the first compile)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, interval_s))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@contextlib.contextmanager
def both(gate: threading.RLock) -> Iterator[None]:
    """The torch lock, then the gate (the order a compile takes them in). While the gate is
    held elsewhere, the torch lock is let go whenever another thread waits for it: the gate's
    holder may be that thread, waiting on an imported task's reference (which takes the lock)."""
    lock = torch_lock()
    while True:
        with lock:
            while not gate.acquire(timeout=GATE_POLL_S):
                if lock.waiting > 0:
                    break
            else:
                try:
                    yield
                finally:
                    gate.release()
                return
        time.sleep(GATE_POLL_S)


def gate_inductor_benchmarks(gate: threading.RLock) -> None:
    """Make Inductor's GPU benchmarks (the autotuning of a kernel's configurations while
    torch.compile compiles) take `gate`, so they never run beside a timed candidate. A benchmark
    waiting for the gate while a thread waits for the torch lock (which the compiling thread
    holds) runs without it: the gate's holder may be the one waiting, and it times nothing then."""
    try:
        from torch._inductor.runtime import benchmarking
    except Exception:  # no torch, or an Inductor without this module: nothing to gate
        return
    benchmarker = getattr(benchmarking, "benchmarker", None)
    plain = getattr(benchmarker, "benchmark_gpu", None)
    if benchmarker is None or plain is None or getattr(plain, "_fsr_gated", False):
        return
    benchmarker.benchmark_gpu = gated(plain, gate, lambda: torch_lock().waiting > 0)


def gated(fn: Callable[..., Any], gate: threading.RLock, blocking_holder: Callable[[], bool]) -> Callable[..., Any]:
    """`fn` run holding `gate`, or without it once `blocking_holder()` says waiting could deadlock."""

    def run(*args: Any, **kwargs: Any) -> Any:
        while not gate.acquire(timeout=GATE_POLL_S):
            if blocking_holder():
                return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        finally:
            gate.release()

    run._fsr_gated = True  # type: ignore[attr-defined]
    return run
