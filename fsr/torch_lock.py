"""The process's one lock around torch work that reads or sets torch's default dtype.

An imported task's forward64 sets the default dtype to float64 (tensors a forward makes without a
dtype must be float64 too) and that default is process-wide: a task's inputs drawn in another
thread meanwhile came out float64 where the task declares float32, and a kernel then read them as
garbage. So the GPU child's comparators and every imported task's runtime (each task holds its own
copy of fsr/kernelbench/runtime.py) take this one lock; the runtime imports it from here.
"""

from __future__ import annotations

import threading

# Reentrant: a comparator holding it may call into a task's runtime, which takes it again.
_LOCK = threading.RLock()


def torch_lock() -> threading.RLock:
    """The lock; the same object for every caller in this process."""
    return _LOCK
