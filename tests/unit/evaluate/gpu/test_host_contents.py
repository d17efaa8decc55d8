"""A GPU child's host contents (fsr.evaluate.gpu.contents): built once per task, in the background,
kept within a host budget apart from the device, so preparing a task again is not a rebuild."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from fsr import tasks
from fsr.evaluate.gpu.contents import HostContents, host_budget_bytes
from fsr.evaluate.gpu.verify import Expected

MIB = 2**20


class Builds:
    """A stand-in for the child's build: one MiB of inputs per task, `build_s` to make, counted."""

    def __init__(self, build_s: float = 0.05, fail: str = "") -> None:
        self.build_s, self.fail = build_s, fail
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, task):
        with self.lock:
            self.counts[task.name] = self.counts.get(task.name, 0) + 1
        time.sleep(self.build_s)
        if task.name == self.fail:
            raise tasks.TaskError(f"task {task.name}: make_inputs failed")
        value = np.zeros(MIB // 8)
        return [({"x": np.zeros(MIB // 8)}, {"y": Expected(value, value)})]


@pytest.fixture(scope="module")
def suite():
    return [tasks.load(name) for name in ("softmax", "gelu", "sgemm", "layernorm")]


def test_a_task_is_built_once_however_often_it_is_asked_for(suite):
    builds = Builds()
    contents = HostContents(builds, budget_bytes=100 * MIB)
    contents.warm(suite, at_once=2)
    for _ in range(3):
        for task in suite:
            got, _ = contents.get(task)
            assert got[0][0]["x"].nbytes == MIB
    assert builds.counts == {t.name: 1 for t in suite}


def test_past_the_host_budget_the_least_recently_used_is_built_again(suite):
    builds = Builds(build_s=0.0)
    contents = HostContents(builds, budget_bytes=5 * MIB)  # about two tasks' contents (inputs, value, bound)
    for task in suite:
        contents.get(task)
    assert contents.held_bytes <= 5 * MIB
    contents.get(suite[0])  # dropped to make room: built again
    assert builds.counts[suite[0].name] == 2 and builds.counts[suite[-1].name] == 1


def test_ensure_starts_a_build_in_the_background_and_says_when_it_is_done(suite):
    builds = Builds(build_s=0.3)
    contents = HostContents(builds, budget_bytes=100 * MIB)
    started = time.perf_counter()
    assert contents.ensure(suite[0]) is False  # answered at once, not after the build
    assert time.perf_counter() - started < 0.2
    deadline = time.monotonic() + 10
    while not contents.ensure(suite[0]):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    _, waited_s = contents.get(suite[0])
    assert waited_s < 0.1 and builds.counts == {suite[0].name: 1}


def test_a_failed_build_is_raised_where_the_task_is_prepared(suite):
    builds = Builds(build_s=0.0, fail=suite[1].name)
    contents = HostContents(builds, budget_bytes=100 * MIB)
    contents.ensure(suite[1])
    deadline = time.monotonic() + 10
    while not contents.ensure(suite[1]):  # done, though it failed: not retried in the background
        assert time.monotonic() < deadline
        time.sleep(0.02)
    with pytest.raises(tasks.TaskError, match="make_inputs failed"):
        contents.get(suite[1])


def test_the_host_budget_is_the_workers_share_of_the_hosts_memory():
    assert host_budget_bytes(123, 4) == 123  # configured
    whole = host_budget_bytes(0, 10**6)  # every core: 40% of the host's memory
    assert 0 < host_budget_bytes(0, 1) <= whole


def test_the_host_is_idle_once_no_build_is_under_way_or_queued(suite):
    gate = threading.Event()

    def held(task):
        gate.wait(60)
        return Builds(build_s=0.0)(task)

    contents = HostContents(held, budget_bytes=100 * MIB)
    assert contents.idle()  # nothing asked for
    contents.warm(suite[:2], at_once=1)
    assert not contents.idle()  # one building, one queued
    gate.set()
    for task in suite[:2]:
        contents.get(task)
    assert contents.idle()
    gate.clear()
    assert contents.ensure(suite[2]) is False and not contents.idle()  # a build asked for now
    gate.set()
    contents.get(suite[2])
    assert contents.idle()
