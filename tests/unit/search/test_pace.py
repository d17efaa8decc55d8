"""The pacing controller on a virtual clock: Little's-law sizing, the cold start, the ceilings,
backing off on 429 and on climbing latency, and a simulated campaign that keeps workers busy."""

from __future__ import annotations

import heapq
import io
import random

import pytest
from rich.console import Console

from fsr.search.pace import Ceilings, Pacer, PaceStats, WindowLimit
from fsr.search.progress import Progress
from fsr.view import LineView, LiveView, pace_line


def measured(pacer: Pacer, latency_s: float, eval_s: float, answers: int = 32, candidates: int = 1) -> Pacer:
    for _ in range(8):
        pacer.evaluated(eval_s)
    for i in range(answers):
        pacer.answered(float(i), latency_s, candidates)
    return pacer


def test_requests_in_flight_follow_rate_times_latency_over_yield() -> None:
    one = measured(Pacer(Ceilings(max_in_flight=10_000)), latency_s=10.0, eval_s=0.4)
    eight = measured(Pacer(Ceilings(max_in_flight=10_000)), latency_s=10.0, eval_s=0.4)
    four = measured(Pacer(Ceilings(max_in_flight=10_000)), latency_s=10.0, eval_s=0.4, candidates=4)
    n1 = one.allowance(100.0, workers=1, in_flight=0, waiting=0)
    n8 = eight.allowance(100.0, workers=8, in_flight=0, waiting=0)
    n4 = four.allowance(100.0, workers=1, in_flight=0, waiting=0)
    assert 25 <= n1 <= 35  # 2.5 evaluations a second for 10 s, plus headroom
    assert 8 * 25 <= n8 <= 8 * 35
    assert n4 == pytest.approx(n1 / 4, abs=1)  # four candidates an answer: a quarter of the requests


def test_nothing_is_asked_once_the_pipeline_is_full_so_prompts_stay_current() -> None:
    pacer = measured(Pacer(), latency_s=10.0, eval_s=0.4)
    full = pacer.allowance(100.0, workers=1, in_flight=0, waiting=0)
    assert pacer.allowance(100.0, workers=1, in_flight=full, waiting=0) == 0
    assert pacer.allowance(100.0, workers=1, in_flight=0, waiting=full) == 0  # enough ready: wait
    assert pacer.allowance(100.0, workers=1, in_flight=full // 2, waiting=0) > 0


def test_the_cold_start_grows_with_the_age_of_the_oldest_request() -> None:
    pacer = Pacer()
    pacer.evaluated(0.1)
    first = pacer.allowance(0.0, workers=4, in_flight=0, waiting=0)
    assert 1 <= first <= 8  # a request per worker, no guess of the latency
    later = pacer.allowance(5.0, workers=4, in_flight=first, waiting=0, oldest_s=5.0)
    assert later >= 4 / 0.1 * 5.0 - first  # by 5 s, the workers' rate for 5 s is on its way


def test_a_cold_seed_does_not_slow_the_pace_and_one_slow_evaluation_does_not_set_it() -> None:
    # The baseline's evaluation on a cold worker (3.5 s of start-up) once became the evaluation
    # time, and the pace asked for a seventh of what a 0.5-s worker uses.
    cold = Pacer()
    cold.evaluated(3.5, seed=True)
    ramp = cold.allowance(10.0, workers=1, in_flight=0, waiting=0, oldest_s=10.0)
    assert ramp >= 1 / 0.4 * 10.0  # the prior's pace, not the seed's
    quick = Pacer()
    quick.evaluated(0.1, seed=True)  # a quicker seed than the prior: its GPU is at least that quick
    assert quick.allowance(10.0, workers=1, in_flight=0, waiting=0, oldest_s=10.0) >= 1 / 0.1 * 10.0
    steady = measured(Pacer(), latency_s=10.0, eval_s=0.5)
    steady.evaluated(6.0)  # one slow candidate (a long tuning) among quick ones
    assert steady.allowance(100.0, workers=1, in_flight=0, waiting=0) >= 10.0 / 0.5
    slow = measured(Pacer(), latency_s=10.0, eval_s=2.0)  # a slow worker is a slow pace: fewer asked
    assert slow.allowance(100.0, workers=1, in_flight=0, waiting=0) <= 10.0 / 2.0 * 1.15 * 1.2 + 2


def test_before_a_measurement_the_prior_is_per_gpu_not_per_slot() -> None:
    # Eight candidates held by each of two GPUs are sixteen slots, but two GPUs' pace.
    pacer = Pacer(gpus=2)
    assert pacer.target(0.0, workers=16, oldest_s=10.0) <= 2 / 0.4 * 10.0 * 1.15 + 16 + 1e-9
    assert Pacer().target(0.0, workers=16, oldest_s=10.0) > 16 / 0.4 * 10.0  # unknown GPUs: one a slot


def test_the_in_flight_ceiling_is_kept() -> None:
    pacer = measured(Pacer(Ceilings(max_in_flight=16)), latency_s=30.0, eval_s=0.1)
    assert pacer.allowance(100.0, workers=8, in_flight=0, waiting=0) == 16
    assert pacer.allowance(100.0, workers=8, in_flight=16, waiting=0) == 0


def test_a_window_limit_never_holds_more_than_its_limit_in_any_window() -> None:
    limit = WindowLimit(60, window_s=60.0)
    taken: list[float] = []
    now = 0.0
    while now < 300.0:
        if limit.fits(now):
            limit.take(now)
            taken.append(now)
        else:
            now += max(limit.wait_s(now), 1e-3)
            continue
        now += 0.1
    assert all(sum(1 for t in taken if s <= t < s + 60.0) <= 60 for s in taken)
    assert len(taken) >= 5 * 60 - 1  # and it does not hold back more than it must


def test_a_reserved_worst_case_is_settled_to_what_was_used() -> None:
    tokens = WindowLimit(10_000, window_s=60.0)
    entry = tokens.take(0.0, 8_000)
    assert not tokens.fits(1.0, 4_000)
    WindowLimit.settle(entry, 3_000)
    assert tokens.fits(1.0, 4_000)
    assert tokens.wait_s(1.0, 9_000) == pytest.approx(59.0)
    assert WindowLimit(100).fits(0.0, 500)  # larger than the limit: through an empty window only


def test_requests_per_minute_bound_the_allowance_and_are_spread_over_the_window() -> None:
    pacer = measured(Pacer(Ceilings(requests_per_min=60, window_s=6.0)), latency_s=10.0, eval_s=0.01)
    sent, now = [], 100.0
    while now < 118.0:
        allowed = pacer.allowance(now, workers=8, in_flight=0, waiting=0)
        assert allowed <= 6  # a tenth of the window, a tenth of the limit
        pacer.sent(now, allowed)
        sent += [now] * allowed
        now += 0.05
    assert max(sum(1 for t in sent if s <= t < s + 6.0) for s in sent) <= 60
    assert len(sent) >= 0.9 * 3 * 60  # three windows' worth, near enough: the limit is used, not just kept


def test_a_429_halves_the_window_and_holds_until_retry_after() -> None:
    pacer = measured(Pacer(), latency_s=1.0, eval_s=0.01)
    assert pacer.allowance(100.0, workers=8, in_flight=0, waiting=0) >= 100
    pacer.throttled(100.0, retry_after_s=2.0, in_flight=100)
    assert pacer.allowance(101.0, workers=8, in_flight=0, waiting=0) == 0  # Retry-After
    assert pacer.allowance(102.5, workers=8, in_flight=0, waiting=0) == 50
    pacer.throttled(100.2, retry_after_s=None, in_flight=50)  # the same congestion: no second cut
    assert pacer.cwnd == 50
    for i in range(50):
        pacer.answered(103.0 + i * 0.01, 1.0, 1)
    assert 50 < pacer.cwnd < 52  # additive increase: about one request per window of answers


def test_latency_climbing_past_twice_its_floor_shrinks_the_window() -> None:
    pacer = measured(Pacer(), latency_s=1.0, eval_s=0.01)
    before = pacer.allowance(100.0, workers=8, in_flight=0, waiting=0)
    for i in range(16):
        pacer.answered(100.0 + i, 3.0, 1)
    assert 0.69 * 1024 <= pacer.cwnd < 0.71 * 1024  # cut once; a latency that stays up is the model's
    for i in range(8):
        pacer.answered(120.0 + i, 6.0, 1)
    assert pacer.cwnd < 0.5 * 1024  # a further climb cuts again
    assert pacer.throttles == 0 and before > 0


def simulate(workers: int, latency_s: float, eval_s: float, seconds: float, seed: int = 1) -> float:
    """A campaign on a virtual clock: requests answered after latency +- 30%, one candidate
    each; the busy fraction of the workers after the first answer."""
    rng = random.Random(seed)
    pacer, now, step = Pacer(), 0.0, eval_s / 4
    answers: list[tuple[float, float]] = []  # (due, sent)
    waiting, running, busy, first = 0, [0.0] * workers, 0.0, None
    while now < seconds:
        for _ in range(pacer.allowance(now, workers=workers, in_flight=len(answers), waiting=waiting,
                                       oldest_s=now - min((s for _, s in answers), default=now))):
            heapq.heappush(answers, (now + latency_s * rng.uniform(0.7, 1.3), now))
            pacer.sent(now)
        while answers and answers[0][0] <= now:
            due, sent = heapq.heappop(answers)
            pacer.answered(now, due - sent, 1)
            waiting += 1
            first = now if first is None else first
        for w in range(workers):
            if running[w] <= now + step / 2 and waiting:  # float ticks: no lost step
                waiting -= 1
                running[w] = now + eval_s
                pacer.evaluated(eval_s)
                busy += eval_s if first is not None else 0.0
        now += step
    assert first is not None
    return busy / (workers * (seconds - first))


@pytest.mark.parametrize("workers", [1, 8])
@pytest.mark.parametrize("latency_s", [10.0, 30.0])
def test_simulated_workers_stay_busy_at_model_latencies(workers: int, latency_s: float) -> None:
    assert simulate(workers, latency_s, eval_s=0.4, seconds=6 * latency_s) >= 0.9


def test_the_views_show_which_side_sets_the_pace() -> None:
    pace = PaceStats(10.2, 12.6, 212, 230, 3, 0, 2)
    progress = Progress(60.0, 100, 100.0, 8, 0.97, (), 0, 0, 0, pace)
    line = pace_line(progress)
    assert line == ("model latency 10.2 s (p90 12.6 s)  requests in flight 212/230  proposals waiting 3  "
                    "workers waiting 0  429s 2")
    stream = io.StringIO()
    LineView(stream).close(progress)
    assert line in stream.getvalue()
    assert pace_line(Progress(60.0, 100, 100.0, 8, 0.97, (), 0, 0, 0)) is None  # the offline mutator: no line
    rendered = io.StringIO()
    Console(file=rendered, width=200).print(LiveView.render(progress))
    assert "requests in flight 212/230" in rendered.getvalue()
