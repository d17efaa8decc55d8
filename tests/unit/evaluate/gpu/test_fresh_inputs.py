"""Certification's inputs on the host: drawn from the operating system's entropy, so no two
certifications and no screening see the same ones, and the next benchmark content is built ahead
while the last is in use; each set's seed is kept with it and draws the same inputs again
(fsr.certification.set_inputs, what a replay of a lineage's `certify_seeds` runs)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from fsr import certification, tasks
from fsr.evaluate.gpu.certify import Fresh, bench_content, stress_drawn
from fsr.evaluate.gpu.inputs import Content, InputPool, make_content

SOFTMAX = tasks.load("softmax")
SMALL = replace(SOFTMAX, bench_size=SOFTMAX.test_sizes[0])  # the real benchmark size is large


def small(task: tasks.Task, seed: int) -> Content:
    """A benchmark content at the first test size, built as bench_content builds it from `seed`."""
    return bench_content(replace(task, bench_size=task.test_sizes[0]), seed)


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)


def test_fresh_test_inputs_differ_from_the_screening_ones_and_from_another_certification() -> None:
    screening = InputPool(SOFTMAX, seed=0, depth=1)
    again = InputPool(SOFTMAX, seed=0, depth=1)
    one, two = Fresh(SOFTMAX, small), Fresh(SOFTMAX, small)
    try:
        predictable = screening.take(0)[0]["x"]
        assert np.array_equal(predictable, again.take(0)[0]["x"])  # what a kernel could carry answers for
        first, second = one.pool.take(0)[0]["x"], two.pool.take(0)[0]["x"]
        assert not np.array_equal(first, predictable) and not np.array_equal(first, second)
    finally:
        for pool in (screening, again, one.pool, two.pool):
            pool.stop()


def test_each_fresh_benchmark_content_is_new_and_the_next_is_built_ahead() -> None:
    built = threading.Semaphore(0)

    def counted(task: tasks.Task, seed: int) -> Content:
        content = small(task, seed)
        built.release()
        return content

    fresh = Fresh(SOFTMAX, counted)
    try:
        (_, (a, expected)), (_, (b, _)) = fresh.bench(), fresh.bench()
        assert not np.array_equal(a["x"], b["x"])
        assert set(expected) == {arg.name for arg in SOFTMAX.outputs}
        assert built.acquire(timeout=60) and built.acquire(timeout=60)
        assert built.acquire(timeout=60)  # a third, built ahead for the next certification
    finally:
        fresh.close()


def test_a_recorded_seed_draws_each_certification_set_again_and_another_seed_does_not() -> None:
    fresh = Fresh(SOFTMAX, small)
    try:
        for index, size in enumerate(SOFTMAX.test_sizes):
            seed, (inputs, expected) = fresh.pool.take_seeded(index)
            assert seed is not None
            name = certification.test_set(size)
            assert same(certification.set_inputs(SOFTMAX, name, seed), inputs), name
            assert not same(certification.set_inputs(SOFTMAX, name, seed + 1), inputs), name
            # the child's own function draws the same references from it too
            again = make_content(SOFTMAX, tasks.functions(SOFTMAX), {a.name: a.dtype for a in SOFTMAX.outputs}, dict(size),
                                 np.random.default_rng(seed))[1]
            assert np.array_equal(again["y"].bound, expected["y"].bound)
        seed, (inputs, _) = fresh.bench()
        assert same(certification.set_inputs(SMALL, certification.BENCH_SET, seed), inputs)
        assert not same(certification.set_inputs(SMALL, certification.BENCH_SET, seed ^ 1), inputs)
    finally:
        fresh.close()


def test_a_recorded_seed_draws_each_stress_set_again() -> None:
    drawn = stress_drawn(SOFTMAX)
    assert SOFTMAX.stress and len(drawn) == len(SOFTMAX.stress)
    for stress, (seed, (inputs, _)) in zip(SOFTMAX.stress, drawn, strict=True):
        name = certification.stress_set(stress)
        assert same(certification.set_inputs(SOFTMAX, name, seed), inputs), name
        assert not same(certification.set_inputs(SOFTMAX, name, seed + 1), inputs), name
    with pytest.raises(KeyError):
        certification.set_inputs(SOFTMAX, "stress set none at rows=1", 1)


def test_two_certifications_draw_their_sets_from_different_seeds() -> None:
    """The seeds come from the operating system's entropy: nothing in the repository (eval.seed, a
    content hash) gives them, so two certifications of one task, even two sets of one, never share one."""
    one, two = Fresh(SOFTMAX, small), Fresh(SOFTMAX, small)
    try:
        seeds = [one.pool.take_seeded(0)[0], two.pool.take_seeded(0)[0], one.bench()[0], two.bench()[0],
                 one.bench()[0], *(seed for seed, _ in stress_drawn(SOFTMAX) + stress_drawn(SOFTMAX))]
        assert all(isinstance(s, int) and 0 <= s < 2**63 for s in seeds)  # an int64 in the lineage
        assert len(set(seeds)) == len(seeds)
    finally:
        one.close()
        two.close()


def test_a_certification_never_waits_behind_other_tasks_builds() -> None:
    """The builds ahead run one at a time for every task; a certification whose own build is
    still queued behind another task's (a large reference, many seconds) builds its sets itself
    rather than waiting there."""
    from fsr.evaluate.gpu import certify

    release, started = threading.Event(), threading.Event()

    def other_task() -> None:  # another task's build, holding the builder until released
        started.set()
        release.wait(120)

    blocker = certify._builds.submit(other_task)
    assert started.wait(60)
    fresh = Fresh(SOFTMAX, small)  # its first builds queue behind the blocker
    got: list[Any] = []
    try:
        # asked while it waits (the evaluator polls between other candidates' turns): started now
        deadline = time.monotonic() + 60
        while not fresh.ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fresh.ready(), "the certification's sets waited for another task's build"
        taker = threading.Thread(target=lambda: got.extend([fresh.bench(), fresh.stress()]), daemon=True)
        taker.start()
        taker.join(60)
        assert not taker.is_alive(), "the certification waited for another task's build"
        (seed, (inputs, _)), stress = got
        assert isinstance(seed, int) and set(inputs) == {a.name for a in SOFTMAX.inputs}
        assert len(stress) == len(SOFTMAX.stress)
    finally:
        release.set()
        blocker.result(60)
        fresh.close()


def test_taken_without_asking_a_queued_build_is_started_at_once() -> None:
    """`bench` and `stress` taken while the task's builds still queue behind another task's start
    them at once on the builders for what is asked, never wait in the queue."""
    from fsr.evaluate.gpu import certify

    release, started = threading.Event(), threading.Event()

    def other_task() -> None:
        started.set()
        release.wait(120)

    blocker = certify._builds.submit(other_task)
    assert started.wait(60)
    fresh = Fresh(SOFTMAX, small)
    got: list[Any] = []
    try:
        taker = threading.Thread(target=lambda: got.extend([fresh.bench(), fresh.stress()]), daemon=True)
        taker.start()
        taker.join(60)
        assert not taker.is_alive(), "the certification waited for another task's build"
        assert len(got[1]) == len(SOFTMAX.stress)
    finally:
        release.set()
        blocker.result(60)
        fresh.close()


def test_a_build_moved_for_a_waiting_certification_keeps_its_place_while_it_polls() -> None:
    """Moved once to the builders for what is asked, a build stays there however often the
    certification asks (it polls between other candidates' turns): never sent back to the end."""
    from fsr.evaluate.gpu import certify

    release = threading.Event()
    starts = threading.Semaphore(0)

    def busy() -> None:
        starts.release()
        release.wait(120)

    blockers = [certify._builds.submit(busy)] + [certify._asked.submit(busy) for _ in range(2)]
    assert all(starts.acquire(timeout=60) for _ in blockers)
    fresh = Fresh(SOFTMAX, small)
    try:
        assert not fresh.ready()
        moved = fresh._next
        assert not moved.running() and not moved.done()  # queued behind the asked builders' work
        for _ in range(5):
            assert not fresh.ready()
        assert fresh._next is moved
    finally:
        release.set()
        for blocker in blockers:
            blocker.result(60)
        fresh.close()
