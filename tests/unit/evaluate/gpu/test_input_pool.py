"""The GPU child's input pool on the host: every built-in task's inputs in their declared dtypes
and shapes; a task whose make_inputs gives anything else is a one-line error to whoever takes an
item, never a buffer of the wrong bytes and never a wait without end."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from fsr import tasks
from fsr.evaluate.gpu.inputs import InputPool, PoolsAhead


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



def _filled(pool: InputPool, within_s: float = 60.0) -> bool:
    """Whether the pool holds its full depth of every test size within `within_s`."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        with pool.cond:
            if all(len(q) >= d for q, d in zip(pool.items, pool.depths, strict=True)):
                return True
        time.sleep(0.02)
    return False


def _draws(pool: InputPool, task: tasks.Task) -> list[dict[str, np.ndarray]]:
    """Every test size's inputs, the full depth of each, in order."""
    return [pool.take(i)[0] for i in range(len(task.test_sizes)) for _ in range(pool.depths[i])]


def test_a_pool_started_ahead_is_full_before_its_task_is_prepared():
    """The GPU child starts a task's test inputs with its benchmark contents, so its first checks
    take inputs and float64 references already made, rather than waiting for them while holding
    the GPU; they are the inputs of a pool started at the preparation and filled before it is
    taken (a pool's draws come from the task's seed), and another seed draws others."""
    task = tasks.load("gemv")
    ahead = PoolsAhead(seed=0)
    ahead.start(task)
    first = ahead.take(task)
    own, other = InputPool(task, seed=0), InputPool(task, seed=1)
    try:
        assert _filled(first) and _filled(own) and _filled(other)
        made, late, seeded = _draws(first, task), _draws(own, task), _draws(other, task)
        assert all(np.array_equal(a[n], b[n]) for a, b in zip(made, late, strict=True) for n in a)
        assert any(not np.array_equal(a[n], b[n]) for a, b in zip(made, seeded, strict=True) for n in a)
    finally:
        for pool in (first, own, other):
            pool.stop()


def test_a_pool_started_ahead_is_taken_once_and_started_once_while_it_waits():
    """A later preparation (the task dropped and prepared again) starts a pool of its own, as one
    always did; contents built twice while a pool waits (dropped at the host budget) start no second."""
    task = tasks.load("gemv")
    ahead = PoolsAhead(seed=0)
    ahead.start(task)
    started = ahead.take(task)
    own = ahead.take(task)  # none left ahead: a new pool
    ahead.start(task)
    ahead.start(task)
    waiting = ahead.take(task)
    fresh = ahead.take(task)
    try:
        assert len({id(started), id(own), id(waiting), id(fresh)}) == 4
    finally:
        for pool in (started, own, waiting, fresh):
            pool.stop()
