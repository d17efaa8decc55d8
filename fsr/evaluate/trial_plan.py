"""Which tuning trials a candidate measures first, and how a trial is compiled: one place for
both sides of the GPU child's pipe. The parent compiles the first points (and, in a small space,
the others) while the GPU is busy with the previous candidate and ships them with the request;
the child's tuning compiles the points asked later. Both compile with `compile_trial` and both
start the tuner from `start_values` with the seed `tuning_seed`, so the points the parent prepares
are the ones the tuner asks. No CUDA here: the parent imports it.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor

from fsr import candidate as cfmt
from fsr.evaluate import guards, host
from fsr.evaluate.compile import Compiled, CompileFailed, CompileService
from fsr.evaluate.wire import TrialPrograms
from fsr.types import Candidate, Defines, Task

SMALL_SPACE_TRIALS = 2  # a space of at most this many times the trial budget is compiled whole, ahead
MAX_COMPILE_THREADS = 16


class Refused(CompileFailed):
    """A trial's compiled program is refused by the guards (fsr.evaluate.guards.check_compiled):
    another value of a tunable may compile to code that reads a clock. `log` is the reason."""


def compile_trial(trial: Candidate, task: Task, arch: str, compiler: CompileService) -> Compiled:
    """One tuning trial's program: its header checked against the task, compiled by `compiler`,
    and what was compiled checked by the guards; raises HeaderError, CompileFailed or Refused."""
    cfmt.check(trial, task)
    compiled = compiler.compile(trial, arch)
    reason = guards.check_compiled(compiled.ptx, compiled.cubin)
    if reason:
        raise Refused(reason)
    return compiled


def start_values(cand: Candidate, start_defines: Defines = ()) -> dict[str, int]:
    """The tuner's first point: `start_defines` (else the candidate's own values), tunables only."""
    names = {t.name for t in cand.tunables}
    return {k: v for k, v in (start_defines or cand.resolved_defines()) if k in names}


def tuning_seed(cand: Candidate, seed: int) -> int:
    """The tuner's seed for `cand`: the campaign's `tune.seed` mixed with the candidate's id. With
    the one seed for every candidate, TPE's random start-up drew the same points for each of a
    task's candidates (on one H200, rmsnorm's 84 LEAN candidates measured the same few shapes
    57-66 times each, and never 512 threads at 1536 an SM, its fastest); a candidate tuned again
    draws the same points as before."""
    digest = hashlib.sha256(f"{seed}:{cand.id}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def first_points(cand: Candidate, trials: int, seed: int, start_defines: Defines = ()) -> list[dict[str, int]]:
    """The points a tuning of `cand` with this budget, campaign seed and start measures first
    (the tuner is deterministic: fsr.tune.first_points, at `tuning_seed`)."""
    from fsr import tune

    return tune.first_points(cand.tunables, max_trials=trials, seed=tuning_seed(cand, seed),
                             start=start_values(cand, start_defines))


def trial_compiles(cand: Candidate, task: Task, arch: str, trials: int, seed: int, pool: ThreadPoolExecutor,
                   compiler: CompileService, start_defines: Defines = ()) -> dict[Defines, tuple[Future[Compiled], bool]]:
    """The compiles of the configurations `cand`'s tuning measures first, started on `pool` and
    compiled by `compiler`, each
    with whether the tuning needs it first; in a small space (at most SMALL_SPACE_TRIALS times
    the budget) every other configuration too, as the tuner's later asks land there. The
    candidate's own configuration is left out (the static stage compiles it)."""
    from fsr import tune

    first = first_points(cand, trials, seed, start_defines)
    rest: list[dict[str, int]] = []
    if tune.space_size(cand.tunables) <= SMALL_SPACE_TRIALS * trials:
        order = [t.name for t in cand.tunables]
        rest = [dict(zip(order, values, strict=True)) for values in itertools.product(*(t.values for t in cand.tunables))]
    ahead: dict[Defines, tuple[Future[Compiled], bool]] = {}
    for values, needed in [(p, True) for p in first] + [(p, False) for p in rest]:
        trial = cfmt.with_defines(cand, values)
        key = trial.resolved_defines()
        if key != cand.resolved_defines() and key not in ahead:
            ahead[key] = (pool.submit(compile_trial, trial, task, arch, compiler), needed)
    return ahead


def compiled_trials(ahead: dict[Defines, tuple[Future[Compiled], bool]]) -> TrialPrograms:
    """The trial programs that compiled: every one the tuning needs first (waited for), and the
    others already done (the rest are cancelled; the child compiles any it asks for, and reports
    why one does not compile)."""
    out = []
    for key, (future, needed) in ahead.items():
        if not needed and not future.done():
            future.cancel()
            continue
        try:
            compiled = future.result()
        except (CompileFailed, cfmt.HeaderError, CancelledError):
            continue
        out.append((key, compiled.cubin, compiled.lowered, compiled.resources))
    return tuple(out)


def compile_threads(threads: int | None = None) -> int:
    """How many trials the GPU child compiles at once: `threads`, else the worker's share of the
    host's cores (OMP_NUM_THREADS, which the sandbox sets), at most MAX_COMPILE_THREADS."""
    share = threads or int(os.environ.get("OMP_NUM_THREADS") or 0) or host.cores()
    return max(1, min(share, MAX_COMPILE_THREADS))


class TrialCompiles:
    """The GPU child's trial compiles beyond those the parent shipped: each started once, on the
    worker's share of the host's cores (the sandbox sets the BLAS thread variables to it, at most
    MAX_COMPILE_THREADS; NVRTC releases the GIL) and compiled by `compiler`, kept by trial id until
    `forget`."""

    def __init__(self, compiler: CompileService, threads: int | None = None):
        self.compiler = compiler
        self.threads = compile_threads(threads)
        self._pool: ThreadPoolExecutor | None = None  # started with the first compile
        self._started: dict[str, Future[Compiled]] = {}

    def submit(self, trial: Candidate, task: Task, arch: str) -> Future[Compiled]:
        """The trial's compile, started now unless already started."""
        future = self._started.get(trial.id)
        if future is None:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="fsr-compile")
            future = self._started[trial.id] = self._pool.submit(compile_trial, trial, task, arch, self.compiler)
        return future

    def forget(self) -> None:
        """Drop the compiles started so far: those not yet running are cancelled."""
        for future in self._started.values():
            future.cancel()
        self._started.clear()
