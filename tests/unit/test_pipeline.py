"""The evaluator's overlap of one candidate's host work with another's GPU work, without a GPU:
worker time charged once when calls overlap, the trial compiles the parent starts ahead being
exactly the points the child's tuner measures first, and the timing protocol's stopping rule."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from fsr import candidate as cfmt
from fsr import tasks, tune
from fsr.evaluate.evaluator import WorkerTime
from fsr.evaluate.trial_plan import compiled_trials, trial_compiles


def test_overlapping_evaluations_are_charged_the_time_they_add_and_no_more() -> None:
    clock = WorkerTime()
    assert clock.charge(0.0, 1.0) == pytest.approx(1.0)
    assert clock.charge(0.5, 2.0) == pytest.approx(1.0)  # [0.5, 1] was already charged
    assert clock.charge(3.0, 4.0) == pytest.approx(1.0)  # a gap: charged in full
    # one finished first although it started inside a longer one: the longer pays the rest only
    clock = WorkerTime()
    assert clock.charge(2.0, 3.0) == pytest.approx(1.0)
    assert clock.charge(0.0, 10.0) == pytest.approx(9.0)
    assert clock.charge(1.0, 11.0) == pytest.approx(1.0)  # covered by both, but counted once


def test_charges_sum_to_the_union_of_the_spans() -> None:
    spans = [(0.0, 4.0), (1.0, 2.0), (3.0, 6.0), (5.5, 5.7), (8.0, 9.0), (8.5, 12.0)]
    clock = WorkerTime()
    charged = sum(clock.charge(s, e) for s, e in sorted(spans, key=lambda p: p[1]))
    assert charged == pytest.approx(6.0 + 4.0)  # [0, 6] and [8, 12]


def test_many_short_evaluations_inside_a_long_one_are_charged_once() -> None:
    # 20 compile errors finish while one candidate's task is prepared: the long one pays only
    # the time none of them covered (a memory of the last 16 spans charged 0.4 s twice)
    clock = WorkerTime()
    short = sum(clock.charge(i * 0.5, i * 0.5 + 0.1) for i in range(20))
    assert short == pytest.approx(2.0)
    assert clock.charge(0.0, 10.0) == pytest.approx(8.0)


def test_begun_evaluations_are_charged_the_union_and_forgotten_once_no_one_can_overlap(monkeypatch) -> None:
    import fsr.evaluate.evaluator as evaluator

    now = iter([0.0, 1.0, 2.0, 3.0, 10.0, 11.0])
    monkeypatch.setattr(evaluator.time, "perf_counter", lambda: next(now))
    clock = WorkerTime()
    long, a, b, c = clock.begin(), clock.begin(), clock.begin(), clock.begin()  # at 0, 1, 2, 3
    assert clock.charge(a, 2.5) == pytest.approx(1.5)
    assert clock.charge(b, 4.0) == pytest.approx(1.5)  # [2, 2.5] charged to a
    assert clock.charge(c, 5.0) == pytest.approx(1.0)
    assert clock.charge(long, 6.0) == pytest.approx(2.0)  # [0, 1] and [5, 6]
    assert clock._union == []  # nothing runs: a later evaluation starts after all of them
    later = clock.begin()  # at 10
    assert clock.charge(later, 10.5) == pytest.approx(0.5)
    assert clock._running == {}


def test_the_parent_compiles_the_points_the_tuner_measures_first() -> None:
    task = tasks.load("softmax")
    cand = cfmt.parse(task.template_source, task)
    trials = 8
    with ThreadPoolExecutor(4) as pool:
        ahead = trial_compiles(cand, task, "sm_90", trials, 0, pool)
        programs = compiled_trials(ahead)
    names = {t.name for t in cand.tunables}
    start = {k: v for k, v in cand.resolved_defines() if k in names}
    expected = {cfmt.with_defines(cand, p).resolved_defines()
                for p in tune.first_points(cand.tunables, max_trials=trials, seed=0, start=start)}
    expected.discard(cand.resolved_defines())  # the candidate's own configuration is compiled anyway
    needed = {key for key, (_, first) in ahead.items() if first}
    assert expected and needed == expected
    assert expected <= {key for key, _, _, _ in programs}  # the first points are waited for
    assert all(cubin for _, cubin, _, _ in programs)
    assert len(ahead) == len(expected)  # 20 points, more than twice the budget: the first ones only


def test_a_small_space_is_compiled_whole_ahead() -> None:
    task = tasks.load("layernorm")
    cand = cfmt.parse(task.template_source, task)
    assert tune.space_size(cand.tunables) == 12
    with ThreadPoolExecutor(4) as pool:
        ahead = trial_compiles(cand, task, "sm_90", 8, 0, pool)
        for future, _ in ahead.values():
            future.result()
        programs = compiled_trials(ahead)
    assert len(ahead) == len(programs) == 11  # every point but the candidate's own


def test_a_trial_that_does_not_compile_is_left_to_the_child() -> None:
    task = tasks.load("softmax")
    cand = cfmt.parse(task.template_source, task)
    broken = cfmt.with_defines(cand, {})
    broken = type(broken)(**{**broken.__dict__, "source": broken.source + "\n#error never compiles\n"})
    with ThreadPoolExecutor(2) as pool:
        ahead = trial_compiles(broken, task, "sm_90", 4, 0, pool)
        for future, _ in ahead.values():
            future.exception()  # all finished: none is dropped for being late
        assert ahead and compiled_trials(ahead) == ()


def test_the_timing_stops_once_the_median_is_known_and_not_before() -> None:
    from fsr.evaluate.bench import median_error

    steady = [1000.0 + (i % 3) for i in range(10)]  # 0.1% spread
    noisy = [1000.0 * (1 + 0.05 * ((i * 7) % 5 - 2)) for i in range(10)]  # 5% spread
    assert median_error(steady) < 0.003
    assert median_error(noisy) > 0.003
    assert median_error([1.0, 1.0]) == float("inf")
    # an odd slow sample (a host hiccup, a clock dip) does not keep a steady kernel running
    assert median_error(steady + [5000.0]) < 0.003
