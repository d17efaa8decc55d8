"""Tuning trials in the GPU child: the objective that `fsr.tune` searches with.

The GPU should set the pace, so a trial's host work is done ahead: the parent compiles the points
the tuner measures first (fsr.tune.first_points) while the GPU is still busy with the previous
candidate, and ships them with the request; points asked later are compiled here, all of a
batch at once on the worker's host cores (NVRTC releases the GIL), while the GPU checks and times
the points before them. Each trial is checked at the largest of the small test sizes (which
also warms its program, and catches most faults of scale before the trial runs at the bench
size), timed with the short protocol (`bench.sample_trial`: a few samples, stopped after one or
two when clearly slower than the best so far) and, only when it beats the best so far, checked
at the other small sizes: a trial slower than the best cannot win, so its checks would decide
nothing. Only the winner is timed with the full protocol, by the caller, without a
second warm-up (its trial has just run it), and checked again at every size.

Runs in the evaluator's child process only (imports cupy).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import cupy as cp
import numpy as np

from fsr import candidate as cfmt
from fsr.evaluate import bench
from fsr.evaluate.compile import Compiled, CompileFailed, compile_candidate
from fsr.evaluate.verify import (
    Buffers,
    LaunchRefused,
    Program,
    check_size,
    make_buffers,
    scratch_buffers,
    synchronize,
)
from fsr.types import Candidate, Defines, Resources, SizeCheck

if TYPE_CHECKING:
    from fsr import tune as tune_module
    from fsr.evaluate.child import Child, EvalRequest, TaskState

SMALL_SIZE_ELEMENTS = 1 << 20  # tuning trials verify only sizes this small
UNCHECKED = "slower than the best so far: checked at the largest small test size only"


@cache
def compile_pool() -> ThreadPoolExecutor:
    """Threads for trial compiles: the worker's share of the host's cores (the sandbox sets the
    BLAS thread variables to it), at most 16."""
    share = int(os.environ.get("OMP_NUM_THREADS") or 0) or os.cpu_count() or 1
    return ThreadPoolExecutor(max(1, min(share, 16)), thread_name_prefix="fsr-compile")


# Compiles started here, by trial candidate id: the points the tuner asks beyond those the parent
# compiled ahead (EvalRequest.programs).
_AHEAD: dict[str, Future[Compiled]] = {}


def compile_ahead(trial: Candidate, task: Any, arch: str) -> Future[Compiled]:
    """The trial's compile, started now on the compile threads unless already started."""
    future = _AHEAD.get(trial.id)
    if future is None:
        future = _AHEAD[trial.id] = compile_pool().submit(_compile, trial, task, arch)
    return future


def _compile(trial: Candidate, task: Any, arch: str) -> Compiled:
    cfmt.check(trial, task)
    return compile_candidate(trial, arch)


def forget_ahead() -> None:
    """Drop compiles started ahead: those not yet running are cancelled."""
    for future in _AHEAD.values():
        future.cancel()
    _AHEAD.clear()


class Trials:
    """One candidate's tuning: compiles queued ahead, each trial checked and timed on demand."""

    def __init__(self, child: Child, state: TaskState, cand: Candidate, req: EvalRequest):
        self.child, self.state, self.cand = child, state, cand
        self.own = (cand.resolved_defines(), Program(req.cubin, req.lowered))  # compiled by the parent
        # so were these; each loaded when first measured, kept with the compiler's report
        self.shipped = {key: (cubin, lowered, resources) for key, cubin, lowered, resources in req.programs}
        self.loaded: dict[Defines, tuple[Program, Resources]] = {}
        self.pending: dict[Defines, Future[Compiled]] = {}
        self.best_us: float | None = None
        sizes = state.task.test_sizes
        elements = [int(np.prod([v for _, v in s], dtype=np.int64)) for s in sizes]
        # the small sizes, largest first: the one every trial is checked at before it is timed
        self.small = sorted((i for i, e in enumerate(elements) if e <= SMALL_SIZE_ELEMENTS),
                            key=lambda i: -elements[i])
        # One input set per small size for all of this candidate's trials (a filter only: the
        # winner is checked on fresh inputs at every size), on device buffers kept while intact.
        self.contents: dict[int, Any] = {}
        self.kept: dict[int, Buffers] = {}

    def prefetch(self, points: Iterable[dict[str, int]]) -> None:
        """Start compiling these points on the compile threads (each once)."""
        for values in points:
            trial = cfmt.with_defines(self.cand, values)
            key = trial.resolved_defines()
            if key != self.own[0] and key not in self.shipped and key not in self.loaded and key not in self.pending:
                self.pending[key] = compile_ahead(trial, self.state.task, self.child.device.arch)

    def program(self, trial: Candidate) -> Program:
        """The trial's loaded program; raises CompileFailed or HeaderError."""
        key = trial.resolved_defines()
        if key == self.own[0]:
            return self.own[1]
        if key not in self.loaded:
            if key in self.shipped:
                cubin, lowered, resources = self.shipped.pop(key)
            else:
                future = self.pending.pop(key, None) or compile_ahead(trial, self.state.task, self.child.device.arch)
                compiled = future.result()
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
        self.child.note("tuning trial " + " ".join(f"{k}={v}" for k, v in values.items()))
        try:
            program = self.program(trial)
            failed = self._check(trial, program, self.small[:1])
            if failed is not None:
                return tune.TrialOutcome(None, "wrong " + describe(failed))
            latency = float(np.median(self._time(trial, program)))
            if self.best_us is not None and latency >= self.best_us:
                return tune.TrialOutcome(latency, UNCHECKED if len(self.small) > 1 else "")
            failed = self._check(trial, program, self.small[1:])
            if failed is not None:
                return tune.TrialOutcome(None, "wrong " + describe(failed))
        except CompileFailed as e:
            return tune.TrialOutcome(None, "compile error: " + (e.log.splitlines() or [""])[0])
        except (LaunchRefused, cfmt.HeaderError, cp.cuda.memory.OutOfMemoryError) as e:
            return tune.TrialOutcome(None, str(e)[:300])
        self.best_us = latency
        return tune.TrialOutcome(latency, "")

    def _check(self, trial: Candidate, program: Program, indices: list[int]) -> SizeCheck | None:
        """The first failed check at these (small) sizes, or None."""
        task, stream = self.state.task, self.child.stream
        for i in indices:
            if i not in self.contents:
                self.contents[i] = self.state.pool.take(i)
            inputs, expected = self.contents[i]
            sizes = dict(task.test_sizes[i])
            with stream:
                kept = self.kept.pop(i, None) or make_buffers(task, Candidate(task=task.name, source="", launches=()), sizes, inputs)
                buf = Buffers(kept.inputs, kept.outputs, scratch_buffers(trial, sizes))
            check = check_size(program, trial, task, task.test_sizes[i], inputs, expected, stream, buffers=buf)
            if not check.passed:
                return check
            self.kept[i] = buf
        return None

    def _time(self, trial: Candidate, program: Program) -> list[float]:
        from fsr.evaluate.child import bench_launches

        child, cfg = self.child, self.child.tune_cfg
        run, before = bench_launches(self.state, trial, program, child.stream)
        samples = bench.sample_trial(run, child.stream, child.flusher, budget_s=cfg.trial_bench_budget_s,
                                     max_samples=cfg.trial_max_samples, best_us=self.best_us,
                                     stop_ratio=cfg.trial_stop_ratio, cut_ratio=cfg.trial_cut_ratio, before=before,
                                     hold=child.hold)
        synchronize(child.stream)
        return samples


@dataclass(frozen=True)
class Tuned:
    """The best configuration (None if no trial was feasible), its program and compiler report
    (None when it is the candidate's own configuration), the trial records, and the best
    configuration's trial median in microseconds (it spares the full protocol its warm-up)."""

    candidate: Candidate | None
    program: Program | None
    resources: Resources | None
    trials: tuple[Any, ...]
    best_us: float | None = None


def run(child: Child, state: TaskState, cand: Candidate, req: EvalRequest) -> Tuned:
    """Tune `cand`'s tunables."""
    from fsr import tune

    trials = Trials(child, state, cand, req)
    names = {t.name for t in cand.tunables}
    start = {k: v for k, v in (req.start_defines or cand.resolved_defines()) if k in names}
    result = tune.tune(cand.tunables, trials.measure, max_trials=req.tune_trials,
                       time_budget_s=child.tune_cfg.time_budget_s, seed=child.tune_cfg.seed, start=start,
                       journal_path=req.journal_path, study_name=f"{cand.task}-{cand.id}",
                       prefetch=trials.prefetch)
    forget_ahead()  # points the budget left unmeasured
    if not result.best_values:
        return Tuned(None, None, None, result.trials)
    best = cfmt.with_defines(cand, dict(result.best_values))
    program, resources = trials.winner(best.resolved_defines())
    return Tuned(best, program, resources, result.trials, result.best_us)


def describe(check: Any) -> str:
    from fsr.types import size_label

    return f"at {size_label(check.size)}: {check.detail}"
