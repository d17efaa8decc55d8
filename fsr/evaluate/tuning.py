"""Tuning trials in the GPU child: the objective that `fsr.tune` searches with.

The GPU should set the pace, so a trial's host work is done ahead: the tuner names the points it
will measure next (the whole grid, or a batch of TPE asks), and their NVRTC compiles run at once
on the worker's host cores (NVRTC releases the GIL) while the GPU checks and times the points
before them. Each trial is then checked at the small test sizes and timed with the short protocol
(`bench.sample_trial`: a few samples, stopped early when clearly slower than the best so far);
only the winner is timed with the full protocol, by the caller.

Runs in the evaluator's child process only (imports cupy).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cache
from typing import TYPE_CHECKING, Any

import cupy as cp
import numpy as np

from fsr import candidate as cfmt
from fsr.evaluate import bench
from fsr.evaluate.compile import Compiled, CompileFailed, compile_candidate
from fsr.evaluate.verify import LaunchRefused, Program, launch_all, scratch_buffers, synchronize
from fsr.types import Candidate, Defines

if TYPE_CHECKING:
    from fsr import tune as tune_module
    from fsr.evaluate.child import Child, EvalRequest, TaskState

SMALL_SIZE_ELEMENTS = 1 << 20  # tuning trials verify only sizes this small


@cache
def compile_pool() -> ThreadPoolExecutor:
    """Threads for trial compiles: the worker's share of the host's cores (the sandbox sets the
    BLAS thread variables to it), at most 16."""
    share = int(os.environ.get("OMP_NUM_THREADS") or 0) or os.cpu_count() or 1
    return ThreadPoolExecutor(max(1, min(share, 16)), thread_name_prefix="fsr-compile")


class Trials:
    """One candidate's tuning: compiles queued ahead, each trial checked and timed on demand."""

    def __init__(self, child: Child, state: TaskState, cand: Candidate, req: EvalRequest):
        self.child, self.state, self.cand = child, state, cand
        self.own = (cand.resolved_defines(), Program(req.cubin, req.lowered))  # compiled by the parent
        self.pending: dict[Defines, Future[Compiled]] = {}
        self.best_us: float | None = None
        sizes = state.task.test_sizes
        self.small = [i for i, s in enumerate(sizes) if np.prod([v for _, v in s], dtype=np.int64) <= SMALL_SIZE_ELEMENTS]

    def prefetch(self, points: Iterable[dict[str, int]]) -> None:
        """Start compiling these points on the compile threads (each once)."""
        for values in points:
            trial = cfmt.with_defines(self.cand, values)
            key = trial.resolved_defines()
            if key != self.own[0] and key not in self.pending:
                self.pending[key] = compile_pool().submit(self._compile, trial)

    def _compile(self, trial: Candidate) -> Compiled:
        cfmt.check(trial, self.state.task)
        return compile_candidate(trial, self.child.device.arch)

    def program(self, trial: Candidate) -> Program:
        """The trial's loaded program; raises CompileFailed or HeaderError."""
        key = trial.resolved_defines()
        if key == self.own[0]:
            return self.own[1]
        future = self.pending.pop(key, None) or compile_pool().submit(self._compile, trial)
        compiled = future.result()
        return Program(compiled.cubin, compiled.lowered)

    def measure(self, values: dict[str, int]) -> tune_module.TrialOutcome:
        """The objective: compile (ahead), check at the small sizes, time with the short protocol."""
        from fsr import tune

        trial = cfmt.with_defines(self.cand, values)
        try:
            program = self.program(trial)
            checks = self.child._verify(self.state, trial, program, self.small)
            if checks and not checks[-1].passed:
                return tune.TrialOutcome(None, "wrong " + describe(checks[-1]))
            samples = self._time(trial, program)
        except CompileFailed as e:
            return tune.TrialOutcome(None, "compile error: " + (e.log.splitlines() or [""])[0])
        except (LaunchRefused, cfmt.HeaderError, cp.cuda.memory.OutOfMemoryError) as e:
            return tune.TrialOutcome(None, str(e)[:300])
        latency = float(np.median(samples))
        self.best_us = latency if self.best_us is None else min(self.best_us, latency)
        return tune.TrialOutcome(latency, "")

    def _time(self, trial: Candidate, program: Program) -> list[float]:
        child, state, cfg = self.child, self.state, self.child.tune_cfg
        size = dict(state.task.bench_size)
        scratch = scratch_buffers(trial, size)
        arrays = [{k: g.array for k, g in (s.buffers.inputs | s.buffers.outputs | scratch).items()}
                  for s in state.sets]
        zeroed = [scratch[s.name] for s in trial.scratch if s.zero]

        def run(i: int) -> None:
            launch_all(program, trial, state.task, size, arrays[i % len(arrays)], child.stream)

        def before(_: int) -> None:
            for g in zeroed:
                cp.cuda.runtime.memsetAsync(g.array.data.ptr, 0, g.nbytes, child.stream.ptr)

        samples = bench.sample_trial(run, child.stream, child.flusher, budget_s=cfg.trial_bench_budget_s,
                                     max_samples=cfg.trial_max_samples, best_us=self.best_us,
                                     stop_ratio=cfg.trial_stop_ratio, before=before, hold=child.hold)
        synchronize(child.stream)
        return samples


def run(child: Child, state: TaskState, cand: Candidate, req: EvalRequest) -> tuple[Candidate | None, tuple[Any, ...]]:
    """Tune `cand`'s tunables: the best configuration (None if no trial was feasible) and the
    trial records."""
    from fsr import tune

    trials = Trials(child, state, cand, req)
    names = {t.name for t in cand.tunables}
    start = {k: v for k, v in (req.start_defines or cand.resolved_defines()) if k in names}
    result = tune.tune(cand.tunables, trials.measure, max_trials=req.tune_trials,
                       time_budget_s=child.tune_cfg.time_budget_s, seed=child.tune_cfg.seed, start=start,
                       journal_path=req.journal_path, study_name=f"{cand.task}-{cand.id}",
                       prefetch=trials.prefetch)
    for future in trials.pending.values():  # points the budget left unmeasured
        future.cancel()
    if not result.best_values:
        return None, result.trials
    return cfmt.with_defines(cand, dict(result.best_values)), result.trials


def describe(check: Any) -> str:
    from fsr.types import size_label

    return f"at {size_label(check.size)}: {check.detail}"
