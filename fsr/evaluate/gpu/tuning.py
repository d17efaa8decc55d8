"""Tuning trials in the GPU child: the objective that `fsr.tune` searches with.

The GPU should set the pace, so a trial's host work is done ahead: the parent compiles the points
the tuner measures first (fsr.evaluate.trial_plan) while the GPU is still busy with the previous
candidate, and ships them with the request; points asked later are compiled by the `TrialBench`,
all of a batch at once on the worker's host cores (NVRTC releases the GIL), while the GPU checks
and times the points before them. Each trial is checked at the largest of the small test sizes (which
also warms its program, and catches most faults of scale before the trial runs at the bench
size), timed with the short protocol (`bench.sample_trial`: a few samples, stopped after one or
two when clearly slower than the best so far) and, only when it beats the best so far, checked
at the other small sizes: a trial slower than the best cannot win, so its checks would decide
nothing. Only the winner is timed with the full protocol, by the caller, without a
second warm-up (its trial has just run it), and checked again at every size.

What a trial needs from the device (compile, check at a size, time) is the small `TrialBench`
protocol, which the GPU child implements; this module owns the tuning's own state. Runs in the
evaluator's child process only (imports cupy).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import cupy as cp
import numpy as np

from fsr import candidate as cfmt
from fsr.config import TuneConfig
from fsr.evaluate import configurations, guards
from fsr.evaluate.compile import Compiled, CompileFailed
from fsr.evaluate.gpu.programs import LaunchRefused, Program
from fsr.evaluate.trial_plan import start_values, tuning_seed
from fsr.evaluate.wire import EvalRequest
from fsr.types import Candidate, Defines, Resources, SizeCheck, Task, TrialRecord, size_label

if TYPE_CHECKING:
    from fsr import tune as tune_module

SMALL_SIZE_ELEMENTS = 1 << 20  # tuning trials verify only sizes this small
UNCHECKED = "slower than the best so far: checked at the largest small test size only"


class TrialBench(Protocol):
    """What a tuning trial needs from the device that runs it (the GPU child implements it:
    fsr.evaluate.gpu.child.DeviceTrials; tests fake it). One per candidate's tuning."""

    def compile(self, trial: Candidate) -> Future[Compiled]:
        """The trial's compile (header check included), started now unless already started; its
        result raises CompileFailed or HeaderError."""
        ...

    def check(self, trial: Candidate, program: Program, index: int) -> SizeCheck:
        """`trial` checked at test size `index` (raises LaunchRefused); every trial of the
        candidate is checked on the same inputs at a size."""
        ...

    def time(self, trial: Candidate, program: Program, best_us: float | None) -> tuple[list[float], SizeCheck | None]:
        """Samples of `trial` at the benchmark size with the short protocol (bench.sample_trial),
        stopped early when clearly slower than `best_us`, every run reset and checked as in the
        full protocol; and the failed check of a timed run (None: all right). Raises
        LaunchRefused."""
        ...

    def note(self, text: str, deadline_s: float | None = None) -> None:
        """Tell the parent what runs now (named if the child dies or hangs during it), and how
        long it may run before the parent kills the child (None: the candidate's deadline)."""
        ...


class Trials:
    """One candidate's tuning: compiles queued ahead, each trial checked and timed on demand."""

    def __init__(self, bench: TrialBench, task: Task, cand: Candidate, req: EvalRequest):
        self.bench, self.task, self.cand = bench, task, cand
        self.own = (cand.resolved_defines(), Program(req.cubin, req.lowered))  # compiled by the parent
        # so were these; each loaded when first measured, kept with the compiler's report
        self.shipped = {key: (cubin, lowered, resources) for key, cubin, lowered, resources in req.programs}
        self.loaded: dict[Defines, tuple[Program, Resources]] = {}
        self.pending: dict[Defines, Future[Compiled]] = {}
        self.best_us: float | None = None
        self.best_trial_s: float | None = None  # the fastest trial's device part, wall seconds
        self.failed = {frozenset(values): reason for values, reason in req.failed}
        elements = [int(np.prod([v for _, v in s], dtype=np.int64)) for s in task.test_sizes]
        # the small sizes, largest first: the one every trial is checked at before it is timed
        self.small = sorted((i for i, e in enumerate(elements) if e <= SMALL_SIZE_ELEMENTS),
                            key=lambda i: -elements[i])

    def prefetch(self, points: Iterable[dict[str, int]]) -> None:
        """Start compiling these points on the compile threads (each once)."""
        for values in points:
            trial = cfmt.with_defines(self.cand, values)
            key = trial.resolved_defines()
            if key != self.own[0] and key not in self.shipped and key not in self.loaded and key not in self.pending:
                self.pending[key] = self.bench.compile(trial)

    def program(self, trial: Candidate) -> Program:
        """The trial's loaded program; raises CompileFailed or HeaderError."""
        key = trial.resolved_defines()
        if key == self.own[0]:
            return self.own[1]
        if key not in self.loaded:
            if key in self.shipped:
                cubin, lowered, resources = self.shipped.pop(key)
            else:
                compiled = (self.pending.pop(key, None) or self.bench.compile(trial)).result()
                cubin, lowered, resources = compiled.cubin, compiled.lowered, compiled.resources
            self.loaded[key] = (Program(cubin, lowered), resources)
        return self.loaded[key][0]

    def winner(self, key: Defines) -> tuple[Program, Resources | None]:
        """A measured configuration's program, and the compiler's report for it (None for the
        candidate's own: the caller has that)."""
        if key == self.own[0]:
            return self.own[1], None
        return self.loaded[key]

    def measure(self, values: dict[str, int]) -> tune_module.TrialOutcome:
        """The objective: compile (ahead), check at the largest small size, time with the short
        protocol, and check at the other small sizes if the trial beats the best so far (one
        slower cannot win: its latency is told to the tuner, with a reason saying so)."""
        from fsr import tune

        trial = cfmt.with_defines(self.cand, values)
        note = configurations.TRIAL + configurations.label(values)
        if frozenset(values.items()) in self.failed:  # it hung or crashed a child before
            return tune.TrialOutcome(None, self.failed[frozenset(values.items())])
        self.bench.note(note)
        try:
            program = self.program(trial)
            self.bench.note(note, configurations.trial_deadline_s(self.best_trial_s))
            started = time.perf_counter()
            refused = guards.check_module(program.globals, tuple(program.unresettable))
            if refused:
                return tune.TrialOutcome(None, "rejected: " + refused)
            failed = self._check(trial, program, self.small[:1])
            if failed is not None:
                return tune.TrialOutcome(None, "wrong " + describe(failed))
            samples, failed = self.bench.time(trial, program, self.best_us)
            if failed is not None:
                return tune.TrialOutcome(None, "wrong in a timed run " + describe(failed))
            latency = float(np.median(samples))
            if self.best_us is not None and latency >= self.best_us:
                spent = time.perf_counter() - started
                self.best_trial_s = spent if self.best_trial_s is None else min(self.best_trial_s, spent)
                return tune.TrialOutcome(latency, UNCHECKED if len(self.small) > 1 else "")
            failed = self._check(trial, program, self.small[1:])
            if failed is not None:
                return tune.TrialOutcome(None, "wrong " + describe(failed))
        except CompileFailed as e:
            return tune.TrialOutcome(None, "compile error: " + (e.log.splitlines() or [""])[0])
        except (LaunchRefused, cfmt.HeaderError, cp.cuda.memory.OutOfMemoryError) as e:
            return tune.TrialOutcome(None, str(e)[:300])
        spent = time.perf_counter() - started
        self.best_trial_s = spent if self.best_trial_s is None else min(self.best_trial_s, spent)
        self.best_us = latency
        return tune.TrialOutcome(latency, "")

    def _check(self, trial: Candidate, program: Program, indices: list[int]) -> SizeCheck | None:
        """The first failed check at these (small) sizes, or None."""
        for i in indices:
            check = self.bench.check(trial, program, i)
            if not check.passed:
                return check
        return None


@dataclass(frozen=True)
class Option:
    """A measured configuration: its candidate, program, compiler report (None for the
    candidate's own configuration) and trial median in microseconds (it spares the full
    protocol its warm-up)."""

    candidate: Candidate
    program: Program
    resources: Resources | None
    trial_us: float


@dataclass(frozen=True)
class Tuned:
    """The feasible configurations, fastest first (at most configurations.FALLBACKS: the next
    is checked in full when the one before fails), and the trial records."""

    options: tuple[Option, ...]
    trials: tuple[TrialRecord, ...]


def run(bench: TrialBench, task: Task, cand: Candidate, req: EvalRequest, cfg: TuneConfig) -> Tuned:
    """Tune `cand`'s tunables on `bench`, from the request's start with the candidate's seed
    (trial_plan.start_values and tuning_seed, as the parent assumed when it compiled the first
    points ahead)."""
    from fsr import tune

    trials = Trials(bench, task, cand, req)
    result = tune.tune(cand.tunables, trials.measure, max_trials=req.tune_trials,
                       time_budget_s=cfg.time_budget_s, seed=tuning_seed(cand, cfg.seed),
                       start=start_values(cand, req.start_defines),
                       journal_path=req.journal_path, study_name=f"{cand.task}-{cand.id}",
                       prefetch=trials.prefetch)
    ranked = sorted({r.values: r for r in reversed(result.trials) if r.feasible and not r.cached}.values(),
                    key=lambda r: (r.latency_us or 0.0, r.number))[:configurations.FALLBACKS]
    options = []
    for record in ranked:
        option = cfmt.with_defines(cand, dict(record.values))
        program, resources = trials.winner(option.resolved_defines())
        options.append(Option(option, program, resources, record.latency_us or 0.0))
    return Tuned(tuple(options), result.trials)


def describe(check: SizeCheck) -> str:
    return f"at {size_label(check.size)}: {check.detail}"
