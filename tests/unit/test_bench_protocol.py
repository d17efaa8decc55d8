"""The timing protocol's bookkeeping, without a GPU: `bench.timed` and `bench.warm_up` replaced by
fakes that record what was asked. A tuning trial takes samples within its budget, one at least,
stopping after one far slower than the best or two clearly slower; the full protocol skips its
warm-up when the time per run is known (the winner's trial has just run it)."""

from __future__ import annotations

import pytest

from fsr.evaluate import bench


class Fake:
    """Every sample reads `us`; records each `timed` call as (first, count) and warm-ups."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, us: float):
        self.us, self.calls, self.warmups = us, [], 0
        monkeypatch.setattr(bench, "timed", self.timed)
        monkeypatch.setattr(bench, "warm_up", self.warm_up)

    def timed(self, run, stream, flusher, count, *, hold=None, prepare=None, first=0):
        self.calls.append((first, count))
        return [self.us] * count

    def warm_up(self, run, stream, flusher, *, warmup_s, hold=None, prepare=None, min_runs=2):
        self.warmups += 1
        return self.us * 1e-6, hold is not None


def trial(fake: Fake, best_us: float | None, budget_s: float = 0.05) -> list[float]:
    return bench.sample_trial(lambda _: None, None, None, budget_s=budget_s, max_samples=4, best_us=best_us,
                              stop_ratio=1.1, cut_ratio=1.5, hold=object())


def test_a_trial_far_slower_than_the_best_stops_after_one_sample(monkeypatch):
    fake = Fake(monkeypatch, us=2000.0)
    assert trial(fake, best_us=1000.0) == [2000.0]
    assert fake.calls == [(0, 1)]


def test_a_trial_clearly_but_not_far_slower_stops_after_two(monkeypatch):
    fake = Fake(monkeypatch, us=1200.0)
    assert len(trial(fake, best_us=1000.0)) == 2
    assert fake.calls == [(0, 1), (1, 1)]


@pytest.mark.parametrize("best_us", [None, 1000.0, 5000.0])
def test_a_trial_that_may_win_or_the_first_takes_its_budget(monkeypatch, best_us):
    fake = Fake(monkeypatch, us=1050.0)
    samples = trial(fake, best_us=best_us)
    assert len(samples) == 4  # max_samples: 0.05 s holds 47 runs of 1.05 ms
    assert fake.calls == [(0, 1), (1, 1), (2, 2)]


@pytest.mark.parametrize("us,expected", [(30000.0, 1), (20000.0, 2), (15000.0, 3), (1000.0, 4)])
def test_a_trials_samples_fill_its_budget_one_at_least(monkeypatch, us, expected):
    fake = Fake(monkeypatch, us=us)
    assert len(trial(fake, best_us=None, budget_s=0.05)) == expected
    assert sum(count for _, count in fake.calls) == expected


def full(fake: Fake, per_run_s: float | None, hold: object | None = object()) -> list[float]:
    return bench.sample(lambda _: None, None, None, budget_s=0.15, min_samples=10, max_samples=200, warmup_s=0.03,
                        hold=hold, rel_error=0.0, per_run_s=per_run_s)


def test_a_known_time_per_run_skips_the_warm_up_and_sets_the_count(monkeypatch):
    fake = Fake(monkeypatch, us=3000.0)
    samples = full(fake, per_run_s=0.03)
    assert fake.warmups == 0 and len(samples) == 10 and fake.calls == [(0, 10)]
    fake = Fake(monkeypatch, us=3000.0)
    full(fake, per_run_s=0.003)  # count = 0.15 / 0.003
    assert fake.warmups == 0 and sum(count for _, count in fake.calls) == 50


def test_without_a_known_time_per_run_the_full_protocol_warms_up(monkeypatch):
    fake = Fake(monkeypatch, us=3000.0)
    assert len(full(fake, per_run_s=None)) == 50 and fake.warmups == 1
