"""The process's one lock around torch work that reads or sets torch's default dtype.

An imported task's forward64 sets the default dtype to float64 (tensors a forward makes without a
dtype must be float64 too) and that default is process-wide: a task's inputs drawn in another
thread meanwhile came out float64 where the task declares float32, and a kernel then read them as
garbage. So the GPU child's comparators and every imported task's runtime (each task holds its own
copy of fsr/kernelbench/runtime.py) take this one lock; the runtime imports it from here.

The lock counts the threads waiting for it: the GPU child's comparator thread, holding it while
torch.compile compiles, asks whether anyone waits before it waits in turn for the child's GPU
gate (fsr.evaluate.gpu.beside), so the two locks never wait on each other.
"""

from __future__ import annotations

import threading
from types import TracebackType


class CountedRLock:
    """A reentrant lock that knows how many threads wait to acquire it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._count = threading.Lock()
        self._waiting = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        if not blocking:
            return False
        with self._count:
            self._waiting += 1
        try:
            return self._lock.acquire(timeout=timeout)
        finally:
            with self._count:
                self._waiting -= 1

    def release(self) -> None:
        self._lock.release()

    @property
    def waiting(self) -> int:
        """Threads blocked in acquire now."""
        return self._waiting

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


# Reentrant: a comparator holding it may call into a task's runtime, which takes it again.
_LOCK = CountedRLock()


def torch_lock() -> CountedRLock:
    """The lock; the same object for every caller in this process."""
    return _LOCK
