"""The timing protocol's bookkeeping, without a GPU: `timing.timed` and `timing.warm_up` replaced by
fakes that record what was asked. A tuning trial takes samples within its budget, one at least,
stopping after one far slower than the best or two clearly slower; the full protocol skips its
warm-up when the time per run is known (the winner's trial has just run it)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from fsr.evaluate.device_globals import ModuleGlobals
from fsr.evaluate.gpu import timing
from fsr.types import SizeCheck


class Fake:
    """Every sample reads `us`; records each `timed` call as (first, count) and warm-ups."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, us: float):
        self.us, self.calls, self.warmups = us, [], 0
        monkeypatch.setattr(timing, "timed", self.timed)
        monkeypatch.setattr(timing, "warm_up", self.warm_up)

    def timed(self, run, stream, flusher, count, *, hold=None, prepare=None, first=0, after=None):
        self.calls.append((first, count))
        return [self.us] * count

    def warm_up(self, run, stream, flusher, *, warmup_s, hold=None, prepare=None, min_runs=2, after=None):
        self.warmups += 1
        return self.us * 1e-6, hold is not None


def trial(fake: Fake, best_us: float | None, budget_s: float = 0.05) -> list[float]:
    return timing.sample_trial(lambda _: None, None, None, budget_s=budget_s, max_samples=4, best_us=best_us,
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
    return timing.sample(lambda _: None, None, None, budget_s=0.15, min_samples=10, max_samples=200, warmup_s=0.03,
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


def sgemm_us(trial) -> float:
    """A made-up latency for an sgemm template configuration: distinct across the tuning space."""
    values = dict(trial.resolved_defines())
    return 1000.0 * values["TX"] / values["TM"] + 10.0 * values["BK"] + values["TN"]


NO_GLOBALS = types.SimpleNamespace(globals=ModuleGlobals(), unresettable=[])  # a trial's program, as far as tuning looks


class FakeBench:
    """A tuning.TrialBench with no GPU: compiles never asked for (programs are faked), `check(bench,
    trial, index)` and `time(bench, trial, best_us)` standing in for the device's checks and trial
    timing; `small` is the tuning's small sizes, in checking order, once it has started."""

    def __init__(self, check, time):
        self._check, self._time, self.small, self.notes = check, time, [], []

    def compile(self, trial):
        raise AssertionError("programs are faked: nothing compiles")

    def check(self, trial, program, index):
        return self._check(self, trial, index)

    def time(self, trial, program, best_us):
        return self._time(self, trial, best_us), None  # no timed run failed its check

    def note(self, text, deadline_s=None):
        self.notes.append((text, deadline_s))


def tune_faked(monkeypatch, check, time, trials: int):
    """tuning.run over the sgemm template on a FakeBench, programs and the winner's lookup faked.
    Returns (the Tuned result, the candidate, the Trials' small sizes in checking order)."""
    from fsr import candidate as cfmt
    from fsr import tasks
    from fsr.config import TuneConfig
    from fsr.evaluate.gpu import tuning
    from fsr.evaluate.wire import EvalRequest

    task = tasks.load("sgemm")
    cand = cfmt.parse(task.template_source, task)
    monkeypatch.setattr(tuning, "Program", lambda cubin, lowered: None)  # no module to load here
    monkeypatch.setattr(tuning.Trials, "program", lambda self, trial: NO_GLOBALS)
    monkeypatch.setattr(tuning.Trials, "prefetch", lambda self, points: None)
    monkeypatch.setattr(tuning.Trials, "winner", lambda self, key: (None, None))
    bench = FakeBench(check, time)
    bench.small = tuning.Trials(bench, task, cand, EvalRequest(cand, b"", ())).small
    tuned = tuning.run(bench, task, cand, EvalRequest(cand, b"", (), tune_trials=trials), TuneConfig())
    return tuned, cand, bench.small


def test_tuning_hands_the_winners_trial_median_to_the_full_timing(monkeypatch):
    """tuning.run's best_us (the full protocol's time per run, in place of a warm-up) is the
    median of the winning configuration's own trial samples, not another configuration's."""
    samples: dict[tuple, list[float]] = {}

    def fake_time(bench, trial, best_us):
        base = sgemm_us(trial)
        samples[trial.resolved_defines()] = [base, base * 1.5, base * 1.01]  # median: base * 1.01
        return samples[trial.resolved_defines()]

    tuned, _, _ = tune_faked(monkeypatch, lambda bench, trial, index: SizeCheck((), True), fake_time, 8)
    assert tuned.options and len(samples) >= 2
    winner = samples[tuned.options[0].candidate.resolved_defines()]
    assert tuned.options[0].trial_us == sorted(winner)[1] == min(sorted(s)[1] for s in samples.values())
    medians = [o.trial_us for o in tuned.options]
    assert medians == sorted(medians) and len(medians) <= 3  # the next best, checked in full if one fails


def test_a_trial_is_checked_past_one_size_only_when_it_beats_the_best(monkeypatch):
    """Every trial is checked at the largest small test size; the other small sizes only for a trial
    faster than the best so far. A faster trial that fails there is infeasible and never wins; a
    slower one is told to the tuner with a reason saying it was checked at one size only."""
    from fsr import tasks
    from fsr.evaluate.gpu import tuning

    sizes = tasks.load("sgemm").test_sizes
    checked: dict[tuple, list[int]] = {}
    wrong_at: set[tuple] = set()

    def fake_check(bench, trial, index):
        key = trial.resolved_defines()
        checked.setdefault(key, []).append(index)
        if key in wrong_at and index != bench.small[0]:
            return SizeCheck(sizes[index], False, 1.0, "wrong")
        return SizeCheck(sizes[index], True)

    def fake_time(bench, trial, best_us):
        if best_us is not None and sgemm_us(trial) < best_us and len(wrong_at) < 2:
            wrong_at.add(trial.resolved_defines())  # the first two to beat the best: wrong past the first size checked
        return [sgemm_us(trial)]

    tuned, cand, small = tune_faked(monkeypatch, fake_check, fake_time, 16)
    assert len(small) > 1 and wrong_at, "the case needs several small sizes and a faster wrong trial"
    elements = [int(np.prod([v for _, v in sizes[i]])) for i in small]
    assert elements == sorted(elements, reverse=True) and elements[0] <= tuning.SMALL_SIZE_ELEMENTS
    records = {r.values: r for r in tuned.trials if not r.cached}
    assert tuned.options and not any(o.candidate.resolved_defines() in wrong_at for o in tuned.options)
    best = min(r.latency_us for r in records.values() if r.feasible and r.reason == "")
    assert tuned.options[0].trial_us == best
    names = {t.name for t in cand.tunables}
    for key, indices in checked.items():
        record = records[tuple((k, v) for k, v in key if k in names)]
        assert indices[0] == small[0]  # the largest small size first, always
        if key in wrong_at:
            assert not record.feasible and record.reason.startswith("wrong at")
        elif record.reason == tuning.UNCHECKED:
            assert indices == small[:1] and record.latency_us >= best
        else:
            assert sorted(indices) == sorted(small) and record.feasible
    assert any(r.reason == tuning.UNCHECKED for r in records.values())
