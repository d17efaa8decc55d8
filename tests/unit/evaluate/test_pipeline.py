"""The evaluator's overlap of one candidate's host work with another's GPU work, without a GPU:
worker time charged once when calls overlap, the trial compiles the parent starts ahead being
exactly the points the child's tuner measures first, and the timing protocol's stopping rule."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from fsr import candidate as cfmt
from fsr import tasks, tune
from fsr.evaluate.evaluator import WorkerTime
from fsr.evaluate.trial_plan import SMALL_SPACE_TRIALS, compiled_trials, trial_compiles, tuning_seed


def charges(spans: list[tuple[float, float]]) -> list[float]:
    """Each span's charge, the spans begun in order of their starts and charged in order of their ends."""
    clock = WorkerTime()
    events = sorted([(s, 0, i) for i, (s, _) in enumerate(spans)] + [(e, 1, i) for i, (_, e) in enumerate(spans)])
    out = [0.0] * len(spans)
    for at, kind, i in events:
        if kind == 0:
            clock.begin(at)
        else:
            out[i] = clock.charge(spans[i][0], at)
    return out


def test_overlapping_evaluations_are_charged_the_time_they_add_and_no_more() -> None:
    # [0.5, 1] goes to the first to finish; a gap is charged in full
    assert charges([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]) == pytest.approx([1.0, 1.0, 1.0])
    # one finished first although it started inside a longer one: the longer pays the rest only;
    # the last is covered by both, but counted once
    assert charges([(2.0, 3.0), (0.0, 10.0), (1.0, 11.0)]) == pytest.approx([1.0, 9.0, 1.0])


def test_charges_sum_to_the_union_of_the_spans() -> None:
    spans = [(0.0, 4.0), (1.0, 2.0), (3.0, 6.0), (5.5, 5.7), (8.0, 9.0), (8.5, 12.0)]
    assert sum(charges(spans)) == pytest.approx(6.0 + 4.0)  # [0, 6] and [8, 12]


def test_many_short_evaluations_inside_a_long_one_are_charged_once() -> None:
    # 20 compile errors finish while one candidate's task is prepared: the long one pays only
    # the time none of them covered (a memory of the last 16 spans charged 0.4 s twice)
    found = charges([(i * 0.5, i * 0.5 + 0.1) for i in range(20)] + [(0.0, 10.0)])
    assert sum(found[:20]) == pytest.approx(2.0) and found[20] == pytest.approx(8.0)


def test_what_no_running_evaluation_can_overlap_is_forgotten() -> None:
    clock = WorkerTime()
    long, a, b, c = (clock.begin(t) for t in (0.0, 1.0, 2.0, 3.0))
    assert clock.charge(a, 2.5) == pytest.approx(1.5)
    assert clock.charge(b, 4.0) == pytest.approx(1.5)  # [2, 2.5] charged to a
    assert clock.charge(c, 5.0) == pytest.approx(1.0)
    assert clock.charge(long, 6.0) == pytest.approx(2.0)  # [0, 1] and [5, 6]
    assert clock._union == [] and not clock._running  # nothing runs: a later evaluation starts after all of them
    assert clock.charge(clock.begin(10.0), 10.5) == pytest.approx(0.5)


def test_the_parent_compiles_the_points_the_tuner_measures_first(compiler) -> None:
    task = tasks.load("softmax")
    cand = cfmt.parse(task.template_source, task)
    trials = 8
    with ThreadPoolExecutor(4) as pool:
        ahead = trial_compiles(cand, task, "sm_90", trials, 0, pool, compiler)
        programs = compiled_trials(ahead)
    names = {t.name for t in cand.tunables}
    start = {k: v for k, v in cand.resolved_defines() if k in names}
    expected = {cfmt.with_defines(cand, p).resolved_defines()
                for p in tune.first_points(cand.tunables, max_trials=trials, seed=tuning_seed(cand, 0), start=start)}
    expected.discard(cand.resolved_defines())  # the candidate's own configuration is compiled anyway
    needed = {key for key, (_, first) in ahead.items() if first}
    assert expected and needed == expected
    assert expected <= {key for key, _, _, _ in programs}  # the first points are waited for
    assert all(cubin for _, cubin, _, _ in programs)
    assert len(ahead) == len(expected)  # 20 points, more than twice the budget: the first ones only


def test_a_small_space_is_compiled_whole_ahead(compiler) -> None:
    task = tasks.load("maxpool2d")
    cand = cfmt.parse(task.template_source, task)
    size = tune.space_size(cand.tunables)
    assert 8 < size <= SMALL_SPACE_TRIALS * 8  # more points than trials, few enough to compile whole
    with ThreadPoolExecutor(4) as pool:
        ahead = trial_compiles(cand, task, "sm_90", 8, 0, pool, compiler)
        for future, _ in ahead.values():
            future.result()
        programs = compiled_trials(ahead)
    assert len(ahead) == len(programs) == size - 1  # every point but the candidate's own


def test_a_trial_that_does_not_compile_is_left_to_the_child(compiler) -> None:
    task = tasks.load("softmax")
    cand = cfmt.parse(task.template_source, task)
    broken = cfmt.with_defines(cand, {})
    broken = type(broken)(**{**broken.__dict__, "source": broken.source + "\n#error never compiles\n"})
    with ThreadPoolExecutor(2) as pool:
        ahead = trial_compiles(broken, task, "sm_90", 4, 0, pool, compiler)
        for future, _ in ahead.values():
            future.exception()  # all finished: none is dropped for being late
        assert ahead and compiled_trials(ahead) == ()


def test_the_timing_stops_once_the_median_is_known_and_not_before() -> None:
    from fsr.evaluate.gpu.timing import median_error

    steady = [1000.0 + (i % 3) for i in range(10)]  # 0.1% spread
    noisy = [1000.0 * (1 + 0.05 * ((i * 7) % 5 - 2)) for i in range(10)]  # 5% spread
    assert median_error(steady) < 0.003
    assert median_error(noisy) > 0.003
    assert median_error([1.0, 1.0]) == float("inf")
    # an odd slow sample (a host hiccup, a clock dip) does not keep a steady kernel running
    assert median_error(steady + [5000.0]) < 0.003
