"""fsr.tune on synthetic latency landscapes: no GPU, no compiler."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import time
import zlib

import optuna
import pytest

from fsr.tune import INFEASIBLE_US, TrialOutcome, TuneResult, first_points, flush_journals, space_size, tune
from fsr.types import Tunable

BLOCK = Tunable("BLOCK", (32, 64, 128, 256, 512, 1024))
ITEMS = Tunable("ITEMS", (1, 2, 4, 8))
UNROLL = Tunable("UNROLL", (1, 2, 4, 8, 16))
LARGE = (BLOCK, ITEMS, UNROLL)  # 120 points, 15 of them infeasible
SMALL = (Tunable("BLOCK", (128, 256, 512, 1024)), Tunable("ITEMS", (1, 2, 4)))  # 12 points


def kernel_us(p: dict[str, int]) -> TrialOutcome:
    """A realistic landscape: a bowl in log2 space (octaves of block size, items per thread and
    unroll matter, and interact a little), a +-1.5% deterministic wobble standing in for the
    effects no model captures, and an infeasible region where a block's registers run out
    (BLOCK * ITEMS > 2048). The optimum (256, 8, 4) sits on that boundary, as real ones do."""
    if p["BLOCK"] * p.get("ITEMS", 1) > 2048:
        return TrialOutcome(None, "ptxas: too many resources requested for launch")
    b, i, u = (math.log2(p.get(k, d)) for k, d in (("BLOCK", 256), ("ITEMS", 8), ("UNROLL", 4)))
    bowl = 1 + 0.08 * (b - 8) ** 2 + 0.12 * (i - 3) ** 2 + 0.04 * (u - 2) ** 2 + 0.03 * (b - 8) * (i - 3)
    wobble = 1 + 0.03 * (zlib.crc32(repr(sorted(p.items())).encode()) % 1000 / 1000 - 0.5)
    return TrialOutcome(50.0 * bowl * wobble, "ok")


class Counting:
    """An objective that remembers every call."""

    def __init__(self, fn=kernel_us, sleep_s: float = 0.0) -> None:
        self.fn, self.sleep_s = fn, sleep_s
        self.calls: list[tuple[tuple[str, int], ...]] = []

    def __call__(self, params: dict[str, int]) -> TrialOutcome:
        self.calls.append(tuple(params.items()))
        time.sleep(self.sleep_s)
        return self.fn(params)


def run(tunables=LARGE, objective=kernel_us, **kw) -> TuneResult:
    kw.setdefault("max_trials", 30)
    kw.setdefault("time_budget_s", 60.0)
    return tune(tunables, objective, **kw)


def violation(frozen: optuna.trial.FrozenTrial) -> float:
    """What TPE sees of a trial's constraints (optuna>=5 property; optuna 4 system attr)."""
    values = (frozen.constraints.values() if hasattr(frozen, "constraints")
              else frozen.system_attrs["constraints"])
    return sum(max(v, 0.0) for v in values)


def test_importing_tune_does_not_import_optuna():
    code = "import sys, fsr.tune; assert 'optuna' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_space_size_is_the_product_of_value_counts():
    assert space_size(LARGE) == 120
    assert space_size(()) == 1


def test_small_space_is_searched_exhaustively_once_per_point():
    objective = Counting()
    result = run(SMALL, objective, max_trials=12)
    every = {tuple(zip(("BLOCK", "ITEMS"), v, strict=True)) for v in itertools.product(*(t.values for t in SMALL))}
    assert result.strategy == "grid"
    assert len(objective.calls) == len(set(objective.calls)) == 12 == result.evaluations
    assert set(objective.calls) == every
    best = min((p for p in every if kernel_us(dict(p)).latency_us is not None),
               key=lambda p: kernel_us(dict(p)).latency_us or 0.0)
    assert result.best_values == best
    assert result.best_us == kernel_us(dict(best)).latency_us


def test_tpe_gets_within_5pct_of_the_grid_optimum_with_a_quarter_of_its_evaluations():
    grid = run(max_trials=space_size(LARGE))
    objective = Counting()
    tpe = run(objective=objective, max_trials=space_size(LARGE) // 4, seed=0)
    assert grid.strategy == "grid" and grid.evaluations == 120
    assert grid.best_values == (("BLOCK", 256), ("ITEMS", 8), ("UNROLL", 4))
    assert tpe.strategy == "tpe"
    assert tpe.evaluations == len(objective.calls) <= 30
    assert grid.best_us is not None and tpe.best_us is not None
    assert tpe.best_us <= 1.05 * grid.best_us


def test_infeasible_points_are_told_as_constraints_and_never_returned(tmp_path):
    # Faster with more work per block, until the block runs out of registers: the bowl's
    # unconstrained optimum lies inside the infeasible region.
    def greedy(p):
        work = p["BLOCK"] * p["ITEMS"]
        return TrialOutcome(None, "too many registers") if work > 2048 else TrialOutcome(1e5 / work)

    journal = str(tmp_path / "tune.log")
    result = run(LARGE, greedy, journal_path=journal, study_name="greedy")
    infeasible = [t for t in result.trials if not t.feasible]
    assert infeasible and all(t.latency_us is None and t.reason == "too many registers" for t in infeasible)
    assert dict(result.best_values)["BLOCK"] * dict(result.best_values)["ITEMS"] <= 2048

    flush_journals()
    study = optuna.load_study(study_name="greedy", storage=_storage(journal))
    frozen = study.get_trials(deepcopy=False)
    assert len(frozen) == len(result.trials)
    for record, trial in zip(result.trials, frozen, strict=True):
        assert trial.state == optuna.trial.TrialState.COMPLETE  # never FAIL: TPE learns from it
        assert (violation(trial) > 0) == (not record.feasible)
        assert trial.value == (INFEASIBLE_US if not record.feasible else record.latency_us)


def test_nothing_feasible_gives_no_best():
    result = run(SMALL, lambda p: TrialOutcome(None, "compile error"), max_trials=5)
    assert result.best_values == () and result.best_us is None and result.evaluations == 5


def test_a_nan_or_negative_latency_is_infeasible():
    result = run(SMALL, lambda p: TrialOutcome(math.nan if p["BLOCK"] == 128 else -1.0), max_trials=12)
    assert not any(t.feasible for t in result.trials)
    assert "invalid latency" in result.trials[0].reason


def test_repeat_proposals_are_answered_from_the_cache():
    objective = Counting()
    result = run(SMALL, objective, max_trials=11)  # 12 points: TPE soon proposes repeats
    assert result.strategy == "tpe"
    assert len(objective.calls) == len(set(objective.calls)) == result.evaluations == 11
    cached = [t for t in result.trials if t.cached]
    assert cached and len(result.trials) == result.evaluations + len(cached)
    assert len(result.trials) <= 3 * 11  # a stalled sampler cannot spin forever


def test_start_is_the_first_trial():
    start = {"BLOCK": 512, "ITEMS": 2, "UNROLL": 16}
    for max_trials in (120, 30):  # grid, then TPE
        objective = Counting()
        result = run(objective=objective, max_trials=max_trials, start=start)
        assert objective.calls[0] == result.trials[0].values == tuple(start.items())


def test_a_start_value_outside_the_declared_values_falls_back_to_the_default():
    result = run(max_trials=30, start={"BLOCK": 384, "ITEMS": 4, "NOT_A_TUNABLE": 1})
    assert result.trials[0].values == (("BLOCK", 32), ("ITEMS", 4), ("UNROLL", 1))


def test_the_trial_budget_is_honoured():
    objective = Counting()
    result = run(objective=objective, max_trials=7)
    assert result.evaluations == len(objective.calls) == 7


def test_the_time_budget_is_honoured():
    objective = Counting(sleep_s=0.02)
    t0 = time.monotonic()
    result = run(objective=objective, max_trials=100, time_budget_s=0.1)
    elapsed_s = time.monotonic() - t0
    assert 2 <= result.evaluations <= 6
    assert elapsed_s < 0.1 + 0.02 + 0.5  # checked before each trial: at most one trial over


def test_at_least_one_trial_runs_even_past_the_time_budget():
    objective = Counting(sleep_s=0.05)
    result = run(objective=objective, time_budget_s=0.0)
    assert result.evaluations == len(objective.calls) == 1


def test_the_same_seed_gives_the_same_trials():
    a, b, c = run(seed=3), run(seed=3), run(seed=4)
    assert a == b
    assert [t.values for t in a.trials] != [t.values for t in c.trials]


def test_the_journal_records_every_trial_and_does_not_change_the_search(tmp_path):
    journal = str(tmp_path / "run.log")
    tpe = run(journal_path=journal, study_name="cand-a")
    grid = run(SMALL, journal_path=journal, study_name="cand-b", max_trials=12)
    again = run(journal_path=journal, study_name="cand-a")  # a resumed run reuses a name
    assert tpe == run() and tpe == again
    flush_journals()
    storage = _storage(journal)
    names = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(storage)}
    assert names == {"cand-a": len(tpe.trials), "cand-b": 12, "cand-a-2": len(tpe.trials)}
    assert grid.strategy == "grid"
    loaded = optuna.load_study(study_name="cand-b", storage=storage)
    assert loaded.best_trial.value == grid.best_us


def test_an_objective_that_raises_closes_its_trial_as_failed(tmp_path):
    def broken(p):
        raise RuntimeError("bug in the caller")

    journal = str(tmp_path / "run.log")
    with pytest.raises(RuntimeError):
        run(objective=broken, journal_path=journal)
    flush_journals()
    trials = optuna.load_study(study_name="fsr", storage=_storage(journal)).trials
    assert trials and all(t.state == optuna.trial.TrialState.FAIL for t in trials)  # none left RUNNING


def test_no_trials_or_no_tunables_means_no_search():
    objective = Counting()
    off = run(objective=objective, max_trials=0)
    assert off.strategy == "none" and off.trials == () and off.evaluations == 0 and not objective.calls
    assert off.best_values == (("BLOCK", 32), ("ITEMS", 1), ("UNROLL", 1)) and off.best_us is None
    assert run((), objective).strategy == "none"


def _storage(path: str) -> optuna.storages.JournalStorage:
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(path))


def test_journal_cost_per_study_stays_flat_as_the_journal_grows(tmp_path, monkeypatch):
    """Each study's trials go in with one append each, by one storage per file that reads only
    what was appended since: no study replays the journal (that grew a run's tuning time with
    its length), and nothing is written while the search runs."""
    from optuna.storages.journal import JournalFileBackend

    journal = str(tmp_path / "run.log")
    appends, read = [], []
    original_append, original_read = JournalFileBackend.append_logs, JournalFileBackend.read_logs

    def counted_append(self, logs):
        appends.append(len(logs))
        return original_append(self, logs)

    def counted_read(self, log_number_from):
        for entry in original_read(self, log_number_from):
            read.append(1)
            yield entry

    monkeypatch.setattr(JournalFileBackend, "append_logs", counted_append)
    monkeypatch.setattr(JournalFileBackend, "read_logs", counted_read)

    def during(params):
        during.appends = max(getattr(during, "appends", 0), len(appends) - during.before)
        return kernel_us(params)

    for i in range(40):
        during.before = len(appends)
        flush_journals()
        during.before = len(appends)
        run(objective=during, journal_path=journal, study_name=f"c{i}", max_trials=8)
    flush_journals()
    written = sum(appends)
    assert during.appends == 0  # nothing written while trials ran
    assert len(read) <= 2 * written  # each entry read about once, not once per later study
    assert len(optuna.get_all_study_summaries(_storage(journal))) == 40


def test_a_journal_that_cannot_be_written_is_logged_and_the_tuning_stands(tmp_path, caplog):
    journal = str(tmp_path / "no-such-dir" / "run.log")
    with caplog.at_level("WARNING", logger="fsr.tune"):
        result = run(journal_path=journal, study_name="lost")
        flush_journals()
        deadline = time.monotonic() + 10
        while "journal write failed" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.01)  # the failure is logged by the writer thread, just after the write ends
    assert result == run()
    assert "journal write failed" in caplog.text


def test_prefetch_is_told_each_point_before_it_is_measured_and_changes_nothing():
    told: list[tuple[tuple[str, int], ...]] = []
    objective = Counting()

    def measured_after_told(params: dict[str, int]) -> TrialOutcome:
        assert tuple(params.items()) in told, f"{params} measured before it was prefetched"
        return objective(params)

    for tunables, trials in ((SMALL, 12), (LARGE, 8)):  # grid, TPE
        told.clear()
        with_prefetch = run(tunables, measured_after_told, max_trials=trials,
                            prefetch=lambda points: told.extend(tuple(p.items()) for p in points))
        plain = run(tunables, kernel_us, max_trials=trials)
        assert with_prefetch.trials == plain.trials and with_prefetch.best_values == plain.best_values
        assert len(told) >= with_prefetch.evaluations > 1


def test_tpe_start_up_asks_are_prefetched_together():
    batches: list[int] = []
    result = run(LARGE, kernel_us, max_trials=8, prefetch=lambda points: batches.append(len(points)))
    assert result.strategy == "tpe" and batches[0] == 8  # the whole budget falls in the start-up phase


def test_first_points_are_what_tuning_prefetches_first():
    for tunables, trials, seed in ((SMALL, 12, 0), (LARGE, 8, 0), (LARGE, 8, 3), (SMALL, 5, 1)):
        batches: list[list[dict[str, int]]] = []
        run(tunables, kernel_us, max_trials=trials, seed=seed, start={"BLOCK": 256}, prefetch=batches.append)
        assert first_points(tunables, max_trials=trials, seed=seed, start={"BLOCK": 256}) == batches[0]
    assert first_points(LARGE, max_trials=8, seed=0) != first_points(LARGE, max_trials=8, seed=1)
