"""Tunes one candidate's launch parameters: an exhaustive grid when the space fits the trial
budget, else Optuna's TPE through ask/tell.

The objective compiles, checks and times one configuration and returns a `TrialOutcome`; an
infeasible configuration (compile error, too many registers or too much shared memory, wrong
result, launch error) is a value with latency None, never an exception. Infeasible trials are
told to Optuna as COMPLETE with a positive constraint, never as FAIL: TPE learns nothing from a
FAIL, and a constraint lets it learn where the infeasible region is.

This is the only module that imports optuna, and it does so inside functions, so that
`import fsr.tune` stays cheap for processes that never tune.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import logging
import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from fsr.types import TrialRecord, Tunable

if TYPE_CHECKING:
    import optuna

log = logging.getLogger(__name__)

Point = tuple[tuple[str, int], ...]  # (tunable name, value) in declaration order
Strategy = Literal["grid", "tpe", "none"]

# Told to Optuna as the value of an infeasible trial. Finite so the study stays plottable in
# optuna-dashboard; TPE ranks infeasible trials by their constraint, not by this value.
INFEASIBLE_US = 1e9
CONSTRAINT_ATTR = "constraint"  # user attr: [0.0] feasible, [1.0] infeasible
# TPE keeps proposing points it has already seen once the space is mostly explored; repeats are
# answered from the cache, and this bounds how many asks a run may make per allowed evaluation.
ASKS_PER_EVALUATION = 3
# TPE's random start-up phase (Optuna's default length, set explicitly because the batching
# below depends on it): its asks do not depend on each other's results, so they are asked
# together and the objective can prepare them together (`prefetch`).
STARTUP_TRIALS = 10
Prefetch = Callable[[list[dict[str, int]]], None]


@dataclass(frozen=True)
class TrialOutcome:
    """What the objective measured for one configuration: latency in microseconds, or None when
    the configuration is infeasible; `reason` says why (compiler message, mismatch, ...)."""

    latency_us: float | None
    reason: str = ""


@dataclass(frozen=True)
class TuneResult:
    """A tuning run: the best feasible values (empty if none), every trial, and how many times
    the objective was actually called (`evaluations`, cache hits excluded)."""

    best_values: Point
    best_us: float | None
    trials: tuple[TrialRecord, ...]
    evaluations: int
    strategy: Strategy


def space_size(tunables: Sequence[Tunable]) -> int:
    """Number of configurations: the product of the tunables' value counts (1 when none)."""
    return math.prod(len(t.values) for t in tunables)


def tune(
    tunables: tuple[Tunable, ...],
    objective: Callable[[dict[str, int]], TrialOutcome],
    *,
    max_trials: int,
    time_budget_s: float,
    seed: int = 0,
    start: dict[str, int] | None = None,
    journal_path: str | None = None,
    study_name: str = "fsr",
    prefetch: Prefetch | None = None,
) -> TuneResult:
    """Search the tunables for the lowest latency.

    Stops after `max_trials` objective calls or once `time_budget_s` has passed (checked before
    each trial; the first trial always runs). `start` (e.g. the parent's best values) is the
    first trial; entries naming no tunable or a value it does not list fall back to the default.
    With `max_trials <= 0` or no tunables nothing runs: strategy "none", best = the defaults, and
    the caller measures them itself. With `journal_path`, the trials are also written to an
    Optuna journal (study `study_name`, made unique) that optuna-dashboard can open.
    `prefetch(points)` is told, before they are measured, the points the objective will be
    asked next (the grid within the budget; a batch of TPE's start-up asks), so that it can
    prepare them together (compile them concurrently). Deterministic given `seed` and the
    objective's outputs; the points measured do not depend on `prefetch`.
    """
    if max_trials <= 0 or not tunables:
        defaults = tuple((t.name, t.values[0]) for t in tunables)
        return TuneResult(defaults, None, (), 0, "none")
    first = _start_point(tunables, start)
    trials = _Trials(objective, max_trials, time.monotonic() + time_budget_s)
    grid = space_size(tunables) <= max_trials
    # The grid needs a study only to write the journal; TPE always needs one. Studies live in
    # memory; the journal gets a finished study's trials on a background thread (flush_journals).
    study = _create_study(seed) if journal_path or not grid else None
    try:
        ahead = prefetch or (lambda _: None)
        if grid:
            _run_grid(study, tunables, first, trials, ahead)
            return trials.result("grid")
        assert study is not None
        _run_tpe(study, tunables, first, trials, ahead)
        return trials.result("tpe")
    finally:
        if journal_path is not None and study is not None:  # the study is not touched again: no copy
            _journal_later(journal_path, study_name, study.get_trials(deepcopy=False))


def first_points(tunables: tuple[Tunable, ...], *, max_trials: int, seed: int = 0,
                 start: dict[str, int] | None = None) -> list[dict[str, int]]:
    """The points `tune` with these arguments hands to `prefetch` first (the grid within the
    budget, or TPE's first batch of start-up asks), known before there is an objective: the
    same study, seed and asks, so work on them can start early."""
    if max_trials <= 0 or not tunables:
        return []
    first = _start_point(tunables, start)
    if space_size(tunables) <= max_trials:
        return [dict(p) for p in itertools.islice(_grid_points(tunables, first), max_trials)]
    study = _create_study(seed)
    study.enqueue_trial(dict(first))
    _, points, _ = _startup_batch(study, tunables, max_trials, set(), ASKS_PER_EVALUATION * max_trials)
    return [dict(p) for p in dict.fromkeys(points)]


class _Trials:
    """The trials of one run: records, the cache of measured points, and the budgets."""

    def __init__(self, objective: Callable[[dict[str, int]], TrialOutcome], max_trials: int,
                 deadline: float) -> None:
        self.objective = objective
        self.max_trials = max_trials
        self.deadline = deadline  # time.monotonic() seconds
        self.cache: dict[Point, TrialOutcome] = {}
        self.records: list[TrialRecord] = []
        self.evaluations = 0

    def may_continue(self) -> bool:
        """Budgets, checked before each trial; the first trial always runs."""
        if not self.records:
            return True
        return self.evaluations < self.max_trials and time.monotonic() < self.deadline

    def measure(self, point: Point) -> tuple[TrialOutcome, bool]:
        """The outcome at `point` (from the cache when seen before) and whether it was cached."""
        cached = point in self.cache
        if not cached:
            self.cache[point] = _checked(self.objective(dict(point)))
            self.evaluations += 1
        outcome = self.cache[point]
        self.records.append(TrialRecord(len(self.records), point, outcome.latency_us is not None,
                                        outcome.reason, outcome.latency_us, cached))
        return outcome, cached

    def result(self, strategy: Strategy) -> TuneResult:
        feasible = [r for r in self.records if r.feasible and not r.cached]
        best = min(feasible, key=lambda r: r.latency_us or 0.0, default=None)  # first of ties
        return TuneResult(best.values if best else (), best.latency_us if best else None,
                          tuple(self.records), self.evaluations, strategy)


def _checked(outcome: TrialOutcome) -> TrialOutcome:
    """A NaN, infinite or negative latency is a broken measurement, not a fast kernel."""
    us = outcome.latency_us
    if us is not None and not (math.isfinite(us) and us >= 0.0):
        return TrialOutcome(None, f"invalid latency {us!r} us; {outcome.reason}".rstrip("; "))
    return outcome


def _start_point(tunables: Sequence[Tunable], start: dict[str, int] | None) -> Point:
    given = start or {}
    return tuple((t.name, given[t.name] if given.get(t.name) in t.values else t.values[0])
                 for t in tunables)


def _grid_points(tunables: Sequence[Tunable], first: Point) -> Iterator[Point]:
    """Every configuration once, `first` first, then in declaration (defaults-first) order."""
    yield first
    names = [t.name for t in tunables]
    for values in itertools.product(*(t.values for t in tunables)):
        point = tuple(zip(names, values, strict=True))
        if point != first:
            yield point


def _create_study(seed: int) -> optuna.Study:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # optuna>=5 reads constraints that trials set themselves (Trial.set_constraint) and
    # deprecates constraints_func; optuna 4 only knows constraints_func.
    constraints = None if _has_set_constraint() else _constraints
    with warnings.catch_warnings():  # optuna 4 calls constraints_func experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(seed=seed, constraints_func=constraints,
                                             n_startup_trials=STARTUP_TRIALS)
    return optuna.create_study(sampler=sampler, direction="minimize")


# Why the journal is written after the search, off its thread: a JournalStorage appends (and
# fsyncs, under a file lock shared by every worker) once per trial operation, about ten per
# trial; and a storage opened per study replays the whole journal, so each candidate's tuning
# cost grew with the run (bench/journal_cost.py: 24 ms a candidate at the start, 220 ms after
# 300). Here one storage per file and process is kept (it reads only what was appended since),
# and a finished study goes in as one append per trial, on the writer thread.
_PENDING_WRITES: set[Future[None]] = set()  # a long campaign writes one per candidate: keep only these


@functools.cache
def _journal_writer() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(1, thread_name_prefix="optuna-journal")  # joined at interpreter exit


def _journal_later(path: str, name: str, trials: list[optuna.trial.FrozenTrial]) -> None:
    future = _journal_writer().submit(_write_study, path, name, trials)
    _PENDING_WRITES.add(future)
    future.add_done_callback(_written)


def _written(future: Future[None]) -> None:
    """On the writer thread: a failed write is logged (the lineage's trials table holds the
    same records) and never raises; the journal is for dashboards, the run goes on."""
    _PENDING_WRITES.discard(future)
    if not future.cancelled() and (error := future.exception()) is not None:
        log.warning("an Optuna journal write failed: %r", error)


def flush_journals(timeout_s: float | None = None) -> None:
    """Wait until every study handed to the journal is written (or `timeout_s` has passed)."""
    concurrent.futures.wait(list(_PENDING_WRITES), timeout=timeout_s)


def _write_study(path: str, name: str, trials: list[optuna.trial.FrozenTrial]) -> None:
    import optuna

    storage = _journal(path)
    name = _unique_name(name, functools.partial(_has_study, storage))
    optuna.create_study(storage=storage, study_name=name, direction="minimize").add_trials(trials)


@functools.lru_cache(maxsize=8)
def _journal(path: str) -> optuna.storages.JournalStorage:
    import optuna
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(path))


def _unique_name(name: str, taken: Callable[[str], bool]) -> str:
    """A journal may already hold a study of this name (a resumed run): never mix the two."""
    return next(n for n in itertools.chain([name], (f"{name}-{i}" for i in itertools.count(2))) if not taken(n))


def _has_study(storage: optuna.storages.BaseStorage, name: str) -> bool:
    try:
        storage.get_study_id_from_name(name)  # a scan of names, not a copy of every study
    except KeyError:
        return False
    return True


def _has_set_constraint() -> bool:
    import optuna

    return hasattr(optuna.trial.Trial, "set_constraint")


def _constraints(trial: optuna.trial.FrozenTrial) -> Sequence[float]:
    return trial.user_attrs[CONSTRAINT_ATTR]


def _distributions(tunables: Sequence[Tunable]) -> dict[str, optuna.distributions.BaseDistribution]:
    from optuna.distributions import CategoricalDistribution

    return {t.name: CategoricalDistribution(t.values) for t in tunables}


def _run_tpe(study: optuna.Study, tunables: Sequence[Tunable], first: Point,
             trials: _Trials, prefetch: Prefetch) -> None:
    study.enqueue_trial(dict(first))
    size, asks = space_size(tunables), 0
    limit = ASKS_PER_EVALUATION * trials.max_trials
    while trials.may_continue() and len(trials.cache) < size and asks < limit:
        want = max(1, trials.max_trials - trials.evaluations)
        batch, points, asked = _startup_batch(study, tunables, want, set(trials.cache), limit - asks)
        asks += asked
        prefetch([dict(p) for p in dict.fromkeys(points) if p not in trials.cache])
        _measure_batch(study, batch, points, trials)


def _startup_batch(study: optuna.Study, tunables: Sequence[Tunable], want: int, seen: set[Point],
                   asks_left: int) -> tuple[list[optuna.Trial], list[Point], int]:
    """The next trials to measure together: while TPE is in its random start-up phase, asks until
    `want` points not in `seen` are among them (repeats come along, answered from the cache), as
    start-up asks do not depend on results; after it, one ask (it depends on every result)."""
    distributions = _distributions(tunables)
    batch: list[optuna.Trial] = []
    points: list[Point] = []
    new: set[Point] = set()
    while asks_left > len(batch) and len(new) < want:
        if batch and len(study.get_trials(deepcopy=False)) >= STARTUP_TRIALS:
            break  # past the start-up phase: measure what is asked before asking more
        trial = study.ask(distributions)
        point = tuple((t.name, int(trial.params[t.name])) for t in tunables)
        batch.append(trial)
        points.append(point)
        if point not in seen:
            new.add(point)
    return batch, points, len(batch)


def _measure_batch(study: optuna.Study, batch: list[optuna.Trial], points: list[Point], trials: _Trials) -> None:
    """Measure asked trials in order; those the budget (or an objective that raised) leaves
    unmeasured are closed as FAIL, never left RUNNING in the journal."""
    done = 0
    try:
        for trial, point in zip(batch, points, strict=True):
            if not trials.may_continue():
                break
            _tell(study, trial, *_measure_or_fail(study, trial, trials, point))
            done += 1
    finally:
        for trial in batch[done:]:
            if trial.number not in _finished(study):
                trial.set_user_attr("reason", "not measured: the trial budget was spent")
                study.tell(trial, state=_fail_state())


def _finished(study: optuna.Study) -> set[int]:
    return {t.number for t in study.get_trials(deepcopy=False) if t.state.is_finished()}


def _fail_state() -> optuna.trial.TrialState:
    import optuna

    return optuna.trial.TrialState.FAIL


def _run_grid(study: optuna.Study | None, tunables: Sequence[Tunable], first: Point,
              trials: _Trials, prefetch: Prefetch) -> None:
    """Every point in turn; with a study, each is enqueued and asked so the journal shows it."""
    distributions = _distributions(tunables) if study is not None else {}
    prefetch([dict(p) for p in itertools.islice(_grid_points(tunables, first), trials.max_trials)])
    for point in _grid_points(tunables, first):
        if not trials.may_continue():
            break
        if study is None:
            trials.measure(point)
            continue
        study.enqueue_trial(dict(point))
        trial = study.ask(distributions)
        _tell(study, trial, *_measure_or_fail(study, trial, trials, point))


def _measure_or_fail(study: optuna.Study, trial: optuna.Trial, trials: _Trials,
                     point: Point) -> tuple[TrialOutcome, bool]:
    """An objective that raises is a bug in the caller: the trial is closed as FAIL (not left
    RUNNING in the journal) and the exception goes on."""
    import optuna

    try:
        return trials.measure(point)
    except BaseException:
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        raise


def _tell(study: optuna.Study, trial: optuna.Trial, outcome: TrialOutcome, cached: bool) -> None:
    feasible = outcome.latency_us is not None
    violation = 0.0 if feasible else 1.0
    trial.set_user_attr(CONSTRAINT_ATTR, [violation])
    trial.set_user_attr("reason", outcome.reason)
    trial.set_user_attr("cached", cached)
    if _has_set_constraint():
        trial.set_constraint("infeasible", violation)
    study.tell(trial, outcome.latency_us if outcome.latency_us is not None else INFEASIBLE_US)
