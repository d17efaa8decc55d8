"""Racing, without a GPU: the full protocol's rounds stop once the samples show the candidate
clearly slower than the best the caller knows of (3 standard errors of the median past it, and
5% more), and say so; a candidate near the best, noisy samples, or no best, are timed in full."""

from __future__ import annotations

import pytest

from fsr.evaluate.gpu import timing


class Fake:
    """`timing.timed` and `timing.warm_up` replaced: samples cycle through `values`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, values: list[float]):
        self.values, self.calls = values, []
        monkeypatch.setattr(timing, "timed", self.timed)
        monkeypatch.setattr(timing, "warm_up", lambda *a, **k: (values[0] * 1e-6, True))

    def timed(self, run, stream, flusher, count, *, hold=None, prepare=None, first=0, after=None):
        self.calls.append((first, count))
        return [self.values[(first + k) % len(self.values)] for k in range(count)]


def raced(race_us: float | None) -> tuple[list[float], bool]:
    return timing.raced(lambda _: None, None, None, budget_s=1.0, min_samples=5, max_samples=200, warmup_s=0.0,
                        hold=object(), rel_error=0.0, race_us=race_us)


def test_a_candidate_clearly_slower_than_the_best_stops_after_its_first_round(monkeypatch) -> None:
    fake = Fake(monkeypatch, [1200.0, 1201.0, 1199.0, 1200.5])
    samples, cut = raced(race_us=1000.0)
    assert cut and len(samples) == 5 and fake.calls == [(0, 5)]


@pytest.mark.parametrize("race_us", [None, 1160.0, 2000.0])  # no best; within 5% of it; faster than it
def test_a_candidate_near_or_faster_than_the_best_or_with_none_known_is_timed_in_full(monkeypatch, race_us) -> None:
    Fake(monkeypatch, [1200.0, 1201.0, 1199.0, 1200.5])
    samples, cut = raced(race_us)
    assert not cut and len(samples) == 200


def test_noisy_samples_are_not_clearly_slower_until_they_are_known_well_enough() -> None:
    noisy = [900.0, 1500.0, 1100.0, 1700.0, 1000.0]  # median 1100, spread of hundreds
    assert not timing.clearly_slower(noisy, 1000.0)
    assert timing.clearly_slower([1100.0, 1101.0, 1099.0, 1100.5, 1100.2], 1000.0)
    assert not timing.clearly_slower([1100.0, 1101.0], 1000.0)  # too few to say


def test_sample_is_raced_without_a_best(monkeypatch) -> None:
    Fake(monkeypatch, [1200.0])
    assert len(timing.sample(lambda _: None, None, None, budget_s=1.0, min_samples=5, max_samples=50, warmup_s=0.0,
                             hold=object())) == 50
