"""The default-dtype lock is one per process: fsr's GPU child, fsr's own runtime and every imported
task's copy of the runtime take the same lock, with fsr importable or not."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest

from fsr.kernelbench import runtime
from fsr.torch_lock import torch_lock


def task_copy(tmp_path: Path, name: str) -> ModuleType:
    """The runtime as an imported task holds it: its text in a reference.py of its own."""
    path = tmp_path / name / "reference.py"
    path.parent.mkdir()
    path.write_text(Path(runtime.__file__).read_text())
    spec = importlib.util.spec_from_file_location(f"fsr_task_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_copy_of_the_runtime_takes_fsrs_one_lock(tmp_path: Path) -> None:
    assert runtime.torch_lock() is torch_lock()
    assert task_copy(tmp_path, "a").torch_lock() is torch_lock() is task_copy(tmp_path, "b").torch_lock()
    with torch_lock(), torch_lock():  # reentrant: a comparator holding it calls into a task's runtime
        pass


def test_without_fsr_the_copies_still_share_one_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "fsr.torch_lock", None)  # what a checkout without fsr sees
    a, b = task_copy(tmp_path, "a"), task_copy(tmp_path, "b")
    assert a.torch_lock() is not torch_lock()
    assert a.torch_lock() is b.torch_lock()


def test_the_lock_counts_the_threads_waiting_for_it() -> None:
    """The GPU child's comparator thread asks this before it waits for the GPU gate while holding
    the lock (fsr.evaluate.gpu.beside): a count that stayed 0 would let the two locks deadlock."""
    lock = torch_lock()
    entered = threading.Event()

    def wait_for_it() -> None:
        with lock:
            entered.set()

    with lock:
        assert lock.waiting == 0
        thread = threading.Thread(target=wait_for_it)
        thread.start()
        deadline = time.monotonic() + 5
        while lock.waiting == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lock.waiting == 1 and not entered.is_set()
    thread.join(5)
    assert entered.is_set() and lock.waiting == 0
    assert lock.acquire(blocking=False)  # free again, and reentrant for its holder
    assert lock.acquire(timeout=0.01)
    lock.release()
    lock.release()
