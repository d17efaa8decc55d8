"""Certification's inputs on the host: drawn from the operating system's entropy, so no two
certifications and no screening see the same ones, and the next benchmark content is built ahead
while the last is in use."""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np

from fsr import tasks
from fsr.evaluate.gpu.certify import Fresh, bench_content
from fsr.evaluate.gpu.inputs import Content, InputPool

SOFTMAX = tasks.load("softmax")


def small(task: tasks.Task) -> Content:
    """A benchmark content at the first test size (the real one is large), built as bench_content
    builds it: from entropy."""
    return bench_content(replace(task, bench_size=task.test_sizes[0]))


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

    def counted(task: tasks.Task) -> Content:
        content = small(task)
        built.release()
        return content

    fresh = Fresh(SOFTMAX, counted)
    try:
        (a, expected), (b, _) = fresh.bench(), fresh.bench()
        assert not np.array_equal(a["x"], b["x"])
        assert set(expected) == {arg.name for arg in SOFTMAX.outputs}
        assert built.acquire(timeout=60) and built.acquire(timeout=60)
        assert built.acquire(timeout=60)  # a third, built ahead for the next certification
    finally:
        fresh.close()
