"""A GPU child's prepared tasks within a byte budget: least recently used out first, the task just
prepared never, released when dropped; array bytes counted once; an input pool's thread stops."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from fsr import tasks
from fsr.evaluate.gpu.inputs import InputPool, TaskState
from fsr.evaluate.gpu.resident import Resident, footprint
from fsr.types import WorkerSpec

MB = 1 << 20


@dataclass
class Held:
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def held(mb: int) -> Held:
    return Held({"x": np.zeros(mb * MB, dtype=np.uint8)})


def test_footprint_counts_each_array_once_through_containers_and_dataclasses():
    a = np.zeros(1000, dtype=np.float32)
    assert footprint(a) == 4000
    assert footprint({"a": a, "b": [a, (a, np.zeros(10, np.float64))]}) == 4080  # `a` once
    assert footprint(Held({"x": a})) == 4000 and footprint("text") == 0 and footprint(b"bytes") == 0


def test_least_recently_used_goes_first_and_the_new_one_stays():
    released = []
    r: Resident[Held] = Resident(10 * MB, release=released.append)
    a, b, c = held(4), held(4), held(4)
    assert r.add("a", a) == [] and r.add("b", b) == []
    assert r.get("a") is a  # "a" used: "b" is now the least recent
    assert r.add("c", c) == ["b"] and released == [b]
    assert "b" not in r and r.get("b") is None and len(r) == 2 and r.held_bytes == 8 * MB


def test_a_task_larger_than_the_budget_is_held_alone():
    r: Resident[Held] = Resident(4 * MB)
    r.add("small", held(1))
    assert r.add("big", held(6)) == ["small"]
    assert "big" in r and r.held_bytes == 6 * MB


def test_room_is_made_before_preparing_for_a_task_of_the_mean_size():
    r: Resident[Held] = Resident(10 * MB)
    for name in "abc":
        r.add(name, held(3))
    assert r.make_room() == ["a"]  # 9 MB held, 3 MB expected: one out, the peak stays at 9
    assert r.make_room(1 * MB) == [] and r.make_room(10 * MB) == ["b", "c"]


def test_re_adding_a_name_releases_the_value_it_replaces():
    released = []
    r: Resident[Held] = Resident(10 * MB, release=released.append)
    old, new = held(1), held(1)
    r.add("a", old)
    r.add("a", new)
    assert released == [old] and r.get("a") is new and r.held_bytes == 1 * MB


def test_a_dropped_tasks_input_thread_ends_and_its_arrays_are_let_go():
    task = tasks.load("softmax")
    state = TaskState(task, InputPool(task, seed=0))
    state.pool.take(0)  # the thread is filling
    module = tasks.functions(task)
    state.close()
    assert tasks.functions(task) is not module  # loaded afresh: what the old one cached is let go
    deadline = time.monotonic() + 30
    while any(t.name == "inputs-softmax" and t.is_alive() for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the input thread still runs after close()"
        time.sleep(0.05)
    assert state.sets == [] and state.contents == [] and all(q == [] for q in state.pool.items)


def test_a_campaign_warms_all_its_tasks_in_order():
    # the GPU child's host budget, not a count, decides how many are built ahead (gpu/contents.py)
    from fsr.config import Config

    many = [tasks.load("softmax"), tasks.load("gelu")] * 10
    assert len(WorkerSpec.of(Config(), many, warm=True).warm) == 20
    assert WorkerSpec.of(Config(), many[:2], warm=True).warm == ("softmax", "gelu")
    assert WorkerSpec.of(Config(), many).warm == ()


def test_a_pinned_task_is_never_dropped_until_unpinned():
    """The GPU child's comparator thread reads a task's buffers while candidates of other tasks
    are prepared: the task is pinned meanwhile, and dropped only once unpinned."""
    released = []
    r: Resident[Held] = Resident(10 * MB, release=released.append)
    a, b, c = held(4), held(4), held(4)
    r.add("a", a)
    r.pin("a")
    r.pin("a")
    r.add("b", b)
    assert r.add("c", c) == ["b"]  # "a" is the least recently used, but pinned
    r.unpin("a")
    assert r.make_room(4 * MB) == ["c"]  # still pinned once
    r.unpin("a")
    assert r.make_room(8 * MB) == ["a"] and released == [b, c, a]
