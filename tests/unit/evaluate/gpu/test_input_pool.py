"""The GPU child's input pool on the host: every built-in task's inputs in their declared dtypes
and shapes; a task whose make_inputs gives anything else is a one-line error to whoever takes an
item, never a buffer of the wrong bytes and never a wait without end."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fsr import tasks
from fsr.evaluate.gpu.inputs import InputPool


@pytest.mark.parametrize("name", tasks.list_tasks())
def test_every_built_in_task_draws_its_declared_dtypes_and_shapes(name):
    task = tasks.load(name)
    pool = InputPool(task, seed=0, depth=1)
    try:
        for index, size in enumerate(task.test_sizes[:3]):
            inputs, _ = pool.take(index)
            for arg in task.inputs:
                assert inputs[arg.name].dtype == np.dtype(arg.dtype)
                assert inputs[arg.name].shape == tasks.shape_of(task, arg, dict(size))
    finally:
        pool.stop()


def test_inputs_in_another_dtype_are_an_error_for_the_taker_not_garbage(monkeypatch: pytest.MonkeyPatch):
    """softmax's make_inputs drawing float64 after the task loaded (as a float64 reference running
    in another thread once made an imported task's draws)."""
    task = tasks.load("softmax")
    module = tasks.functions(task)
    make = module.make_inputs
    monkeypatch.setattr(module, "make_inputs", lambda sizes, rng: {k: v.astype(np.float64) for k, v in
                                                                    make(sizes, rng).items()})
    pool = InputPool(task, seed=0)
    taken: list[BaseException] = []

    def take() -> None:
        try:
            pool.take(0)
        except tasks.TaskError as e:
            taken.append(e)

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    thread.join(timeout=60)
    pool.stop()
    assert not thread.is_alive(), "take() waited for an item the pool can never make"
    assert taken and "['x'] has dtype float64, task.toml says float32" in str(taken[0])
