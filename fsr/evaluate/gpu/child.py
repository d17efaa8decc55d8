"""The GPU child process: owns the CUDA context, prepares tasks, verifies, tunes and times candidates.

It is started once per evaluator (a CUDA context costs seconds) and replaced only when a kernel
breaks the context or hangs. Requests and replies are the frozen records below, over a pipe.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from functools import partial
from typing import Any

import cupy as cp
import numpy as np

from fsr import tasks
from fsr.evaluate import configurations, guards, host
from fsr.evaluate.compile import Compiled
from fsr.evaluate.compile_pool import worker_compiler
from fsr.evaluate.gpu import ceilings, certify, contents_cache, evict, timing, tuning
from fsr.evaluate.gpu.beside import Beside
from fsr.evaluate.gpu.buffers import Buffers, make_buffers, scratch_buffers
from fsr.evaluate.gpu.comparators import Comparators, import_torch_soon
from fsr.evaluate.gpu.contents import HostContents, host_budget_bytes
from fsr.evaluate.gpu.inputs import (
    BenchSet,
    Content,
    PoolsAhead,
    TaskState,
    no_scratch,
    screening_contents,
)
from fsr.evaluate.gpu.programs import (
    ContextLost,
    LaunchRefused,
    Program,
    failure_reply,
    synchronize,
)
from fsr.evaluate.gpu.resident import Resident, footprint
from fsr.evaluate.gpu.sample_plan import SamplePlan
from fsr.evaluate.gpu.timed_runs import DeviceExpected, TimedRuns, fingerprints, prepare_checks
from fsr.evaluate.gpu.verify import check_size
from fsr.evaluate.trial_plan import TrialCompiles, compile_threads
from fsr.evaluate.wire import Certified, CertifyRequest, ChildResult, EvalRequest, Prepared, Stages
from fsr.types import (
    Candidate,
    Defines,
    DeviceInfo,
    SizeCheck,
    Task,
    Verdict,
    WorkerSpec,
    size_label,
)

log = logging.getLogger(__name__)

DEVICE_SHARE = 0.65  # of the GPU's memory: prepared tasks' device buffers kept (eval.prepared_max_bytes = 0)


class Child:
    """Everything the child holds: device, stream, flusher, per-task inputs."""

    def __init__(self, spec: WorkerSpec, known: DeviceInfo | None = None):
        """`spec.warm`: tasks whose benchmark contents are built on host threads from the start, a
        few at a time, in order, so a campaign's later tasks are ready when their first candidate
        arrives (fsr.evaluate.gpu.contents). A child replacing a crashed one (`known` set) builds
        them one at a time instead: the task a request needs is then built at once by `prepare`
        if its turn has not come, rather than sharing the host with every other task's rebuild."""
        self.spec, self.cfg = spec, spec.eval
        threads = spec.host_threads or host.cores()
        self.ahead = PoolsAhead(self.cfg.seed)  # test inputs started with each task's contents (`_contents`)
        self.disk = contents_cache.open_cache(self.cfg.contents_cache_dir, self.cfg.contents_cache_max_bytes)
        self.contents = HostContents(self._contents, host_budget_bytes(self.cfg.prepared_host_max_bytes, threads))
        warm = spec.warmed()
        sets = max(self.cfg.input_sets, 2)  # each build runs a thread per input set
        self.contents.warm(warm, 1 if known is not None else max(1, threads // sets))
        # the first child times the PyTorch comparators: import it meanwhile
        self.torch_import = import_torch_soon() if known is None else None
        self.stream = cp.cuda.Stream(non_blocking=True)
        info = ceilings.device_info(self.cfg.arch)
        self.hold = timing.Hold()
        if known is None or known.name != info.name:
            measured = {field: measure(self.stream, self.hold) for field, measure in ceilings.CEILINGS.items()}
        else:
            measured = {field: getattr(known, field) for field in ceilings.CEILINGS}
        info = replace(info, **measured)  # type: ignore[arg-type]  # the keys are DeviceInfo float fields
        self.device = info
        self.flusher = timing.L2Flusher(info.l2_bytes)
        self.comparators = Comparators(self.cfg, self.stream, self.flusher, self.hold)
        budget = self.cfg.prepared_max_bytes or int(cp.cuda.Device().mem_info[1] * DEVICE_SHARE)
        # Device bytes only: the host contents they are built from are kept apart (self.contents).
        self.tasks: Resident[TaskState] = Resident(budget, size=lambda state: footprint(state.sets),
                                                   release=TaskState.close)
        # One thing on the GPU at a time: a request (prepare, evaluate) or the comparator thread's
        # timing (fsr.evaluate.gpu.beside), which compiles torch.compile beside candidates.
        self.gate = threading.RLock()
        self.beside = Beside(self.comparators, self.gate, self.tasks, self.cfg.torch_compile, self.torch_import)
        self.fresh_later: list[TaskState] = []  # prepared tasks whose certification inputs wait (start_fresh)
        # tells the parent what runs now, and how long it may run (None: the candidate's deadline)
        self.note: Callable[[str, float | None], None] = lambda text, deadline_s: None
        # Tuning trials the parent did not ship compile here, bounded like the parent's and within
        # the candidate's own deadline: a trial whose compile explodes fails as that trial's
        # compile error instead of timing the candidate out. A campaign's child starts its compile
        # processes now, once the ceilings are measured: its first tunings would wait for them.
        trial_threads = compile_threads()
        self.compiles = TrialCompiles(worker_compiler(
            self.cfg, trial_threads, min(self.cfg.compile_timeout_s, self.cfg.timeout_s / 2), start=bool(warm)),
            trial_threads)

    # -- requests ---------------------------------------------------------------------------
    def prepare(self, name: str, comparators: str = "now") -> Prepared:
        """Load a task: the input pool, the benchmark input sets and their references (built
        ahead if the task was named in `warm`), uploaded, within the prepared tasks' budget;
        then its comparators (the library, PyTorch eager and torch.compile) timed: "now", before
        the reply, or "beside", on the comparator thread while candidates run (their figures
        come with a later reply, wire.Compared); "" for neither (a child that replaces a crashed
        one need not time them again)."""
        started = time.perf_counter()
        task = self.task(name)
        evicted = self.tasks.make_room() if name not in self.tasks else []
        contents, host_s = self.contents.get(task)  # built ahead, kept, or built now
        state = TaskState(task, self.ahead.take(task), contents)
        size = dict(task.bench_size)
        state.sets = [BenchSet(make_buffers(task, no_scratch(task), size, inputs), i,
                               {k: DeviceExpected.upload(v, self.stream) for k, v in expected.items()})
                      for i, (inputs, expected) in enumerate(state.contents)]
        cp.cuda.Device().synchronize()  # the uploads ran on the default stream; fsr's does not wait for it
        for bench_set in state.sets[:1]:  # compiled now, not inside a tuning trial's deadline
            for output, g in bench_set.buffers.outputs.items():
                prepare_checks(g.dtype.name, bench_set.expected[output].value.dtype.name)
        for bench_set in state.sets:
            bench_set.fingerprints = fingerprints(bench_set.buffers.inputs, self.stream)
        evicted += self.tasks.add(name, state)
        if self.cfg.certifies:  # certification's fresh inputs, built on host threads (`start_fresh`)
            self.fresh_later.append(state)
        self.start_fresh()
        if evicted:
            log.info("tasks %s dropped for %s (%.1f GiB of %.1f GiB held)", ", ".join(evicted), name,
                     self.tasks.held_bytes / 2**30, self.tasks.budget_bytes / 2**30)
        if comparators == "beside":
            self.beside.submit(name, state)
        now = comparators == "now"
        library_us = self.comparators.library_us(state) if now and task.has_library else None
        torch_us = self.comparators.pytorch_us(state, None)[0] if now else None
        compiled = now and torch_us and self.cfg.torch_compile != "off"
        compiled_us, compile_s = self.comparators.pytorch_us(state, self.cfg.torch_compile) if compiled else (None, None)
        device_s = time.perf_counter() - started - host_s - (compile_s or 0.0)
        return Prepared(library_us, host_s, device_s, torch_us, compiled_us, compile_s, tuple(evicted))

    def certify(self, req: CertifyRequest) -> Certified:
        """Certify a screened candidate of a prepared task (fsr.evaluate.gpu.certify)."""
        state = self.tasks.get(req.candidate.task)
        if state is None:  # the parent prepares the task first: a bug if seen
            raise tasks.TaskError(f"task {req.candidate.task!r} is not prepared in this child")
        return certify.certify(self, state, req)

    def start_fresh(self) -> None:
        """Start certification's inputs (certify.Fresh: benchmark sets and their float64
        references, built on host threads) for the prepared tasks waiting for them: at once, but
        with `eval.certify` "end" only once the host has built every screening content asked for.
        Such a task is certified at its end, so its fresh builds (float64 products on every core)
        need not meet the other tasks' preparations at the campaign's start, when the host is
        busiest. A certification that comes first starts its own task's (certify.fresh_inputs)."""
        if not self.fresh_later or (self.cfg.certify == "end" and not self.contents.idle()):
            return
        for state in self.fresh_later:
            if state.sets and state.fresh is None:  # not dropped meanwhile, nor started by a certification
                certify.fresh_inputs(state)
        self.fresh_later = []

    def fresh_ready(self, name: str) -> bool | None:
        """Whether a certification of the task would start at once: its fresh benchmark set built
        (fsr.evaluate.gpu.certify); None if the task is not prepared in this child."""
        state = self.tasks.get(name)
        return None if state is None else certify.fresh_inputs(state).ready()

    def ready(self, name: str) -> bool:
        """Whether preparing the task would start uploading at once (prepared already, or its host
        contents built); if not, its contents are built in the background, so the parent can run
        other tasks' candidates on the GPU meanwhile."""
        return name in self.tasks or self.contents.ensure(self.task(name))

    def task(self, name: str) -> Task:
        """A task of the campaign, as the driver loaded it; raises TaskError for another."""
        task = self.spec.task(name)
        if task is None:
            raise tasks.TaskError(f"task {name!r} is not one of this worker's tasks")
        return task

    def _contents(self, task: Task) -> list[Content]:
        """The task's screening benchmark sets and their references (inputs.screening_contents:
        each built once a node with the contents cache, `eval.contents_cache_dir`). The task's test
        inputs start too (PoolsAhead, taken by its next preparation): the first checks of its
        first candidate would otherwise wait for their float64 references while holding the GPU."""
        self.ahead.start(task)
        return screening_contents(task, self.cfg.seed, self.cfg.input_sets, self.disk)

    def evaluate(self, req: EvalRequest) -> ChildResult:
        """Tune (if asked), then check and time in full the best configuration; when it fails,
        the next best in its place (configurations.FALLBACKS at most), each failure recorded
        in its trials. The verdict is the configuration's that stands, else the best one's."""
        self.start_fresh()
        state = self.tasks.get(req.candidate.task)
        if state is None:  # the parent prepares a task the last preparation dropped: a bug if seen
            raise tasks.TaskError(f"task {req.candidate.task!r} is not prepared in this child")
        cand, program = req.candidate, Program(req.cubin, req.lowered)
        clock = _Stages()
        refused = guards.check_module(program.globals, tuple(program.unresettable))
        if refused:
            return ChildResult(Verdict.REJECTED, refused, defines=cand.resolved_defines(), stages=clock.stages())
        own = tuning.Option(cand, program, None, 0.0)
        if not (req.tune_trials > 0 and _space(cand) > 1):
            return self._full(state, own, (), clock, tuned=False, race_us=req.race_us)
        tuned = tuning.run(DeviceTrials(self, state), state.task, cand, req, self.spec.tune)
        self.compiles.forget()  # points the budget left unmeasured
        clock.lap("tune")
        trials, first = tuned.trials, None
        known = configurations.known_failure(_tunable_values(cand), req.failed)
        if not tuned.options and known is not None:  # no configuration stands, the own one hung or crashed before
            verdict = Verdict.TIMEOUT if known.startswith("TIMEOUT") else Verdict.CRASH
            return ChildResult(verdict, known, defines=cand.resolved_defines(), trials=trials, stages=clock.stages())
        failures: list[tuple[Defines, str]] = []
        for option in tuned.options or (own,):  # none feasible: the candidate's own fails as it does
            result = self._full(state, option, trials, clock, tuned=True, race_us=req.race_us)
            if result.verdict == Verdict.OK:
                return replace(result, message=configurations.summary(tuple(failures)))
            values = _tunable_values(option.candidate)
            reason = f"{result.verdict} in the full check: {result.message}"
            failures.append((values, reason[:500]))
            trials = tuple(replace(t, feasible=False, reason=reason[:500]) if dict(t.values) == dict(values) else t
                           for t in trials)
            first = first or result  # the best configuration's failure
        assert first is not None
        others = configurations.summary(tuple(failures[1:]))
        return replace(first, trials=trials, message=first.message + (f"; {others}" if others else ""))

    def _full(self, state: TaskState, option: tuning.Option, trials: tuple[Any, ...], clock: _Stages,
              tuned: bool, race_us: float | None = None) -> ChildResult:
        """One configuration checked at every test size, timed with the full protocol (its trial's
        median spares the warm-up; raced against `race_us`) and its timed runs checked."""
        cand, program = option.candidate, option.program
        if tuned:
            self.note(configurations.TUNED + configurations.label(_tunable_values(cand)), None)
        per_run_s = option.trial_us * 1e-6 if option.trial_us else None
        done = partial(ChildResult, defines=cand.resolved_defines(), resources=program.resources(option.resources),
                       trials=trials)
        try:
            checks = self._verify(state, cand, program, range(len(state.task.test_sizes)))
            clock.lap("verify")
            if not checks[-1].passed:
                return done(Verdict.WRONG, _wrong(checks[-1]), checks, stages=clock.stages())
            samples, timed, cut = self._time(state, cand, program, self.cfg.bench_budget_s,
                                             self.cfg.bench_min_samples, per_run_s, race_us)
            clock.lap("bench")
        except LaunchRefused as e:
            clock.lap("verify")
            return done(Verdict.LAUNCH_ERROR, str(e), stages=clock.stages())
        if not timed.passed:
            return done(Verdict.WRONG, f"timed runs are checked: {_wrong(timed)}", checks + (timed,), tuple(samples),
                        stages=clock.stages())
        return done(Verdict.OK, "", checks + (timed,), tuple(samples), stages=clock.stages(), cut_short=cut)

    # -- stages -----------------------------------------------------------------------------
    def _verify(self, state: TaskState, cand: Candidate, program: Program, indices: Any) -> tuple[SizeCheck, ...]:
        checks = []
        for i in indices:
            inputs, reference = state.pool.take(i)
            check = check_size(program, cand, state.task, state.task.test_sizes[i], inputs, reference, self.stream)
            checks.append(check)
            if not check.passed:
                break
        return tuple(checks)

    def _time(self, state: TaskState, cand: Candidate, program: Program, budget_s: float,
              min_samples: int, per_run_s: float | None = None,
              race_us: float | None = None, evict_hints: bool = False) -> tuple[list[float], SizeCheck, bool]:
        """Samples of the full protocol, every run reset and checked (timed_runs), a few from a
        decoy; the check of the timed runs (failed: WRONG); and whether racing against
        `race_us` cut the timing short. `evict_hints` (certification): flushed so that lines
        kept by eviction-priority hints go too (evict.EvictingFlush). Raises LaunchRefused."""
        runs = TimedRuns(state, cand, program, self.stream, SamplePlan(len(state.sets), min_samples))
        flusher = evict.EvictingFlush(self.flusher, runs.regions()) if evict_hints else self.flusher
        samples, cut = timing.raced(runs.run, self.stream, flusher, budget_s=budget_s, min_samples=min_samples,
                                    max_samples=self.cfg.bench_max_samples, warmup_s=self.cfg.warmup_s,
                                    before=runs.before, after=runs.after, hold=self.hold,
                                    rel_error=self.cfg.bench_rel_error, per_run_s=per_run_s, race_us=race_us)
        synchronize(self.stream)
        failed = runs.verdict()
        return samples, failed or SizeCheck(state.task.bench_size, True), cut

class DeviceTrials:
    """The child's side of one candidate's tuning (tuning.TrialBench): trial compiles on the
    child's compile threads, checks on one input set per small size for all of the candidate's
    trials (a filter only: the winner is checked on fresh inputs at every size) on device
    buffers kept while intact, and the short timing protocol at the benchmark size."""

    def __init__(self, child: Child, state: TaskState):
        self.child, self.state = child, state
        self.contents: dict[int, Content] = {}
        self.kept: dict[int, Buffers] = {}

    def compile(self, trial: Candidate) -> Future[Compiled]:
        return self.child.compiles.submit(trial, self.state.task, self.child.device.arch)

    def note(self, text: str, deadline_s: float | None = None) -> None:
        self.child.note(text, deadline_s)

    def check(self, trial: Candidate, program: Program, index: int) -> SizeCheck:
        task, stream = self.state.task, self.child.stream
        if index not in self.contents:
            self.contents[index] = self.state.pool.take(index)
        inputs, expected = self.contents[index]
        sizes = dict(task.test_sizes[index])
        with stream:
            kept = self.kept.pop(index, None) or make_buffers(task, no_scratch(task), sizes, inputs)
            buffers = Buffers(kept.inputs, kept.outputs, scratch_buffers(trial, sizes))
        check = check_size(program, trial, task, task.test_sizes[index], inputs, expected, stream, buffers=buffers)
        if check.passed:
            self.kept[index] = buffers
        return check

    def time(self, trial: Candidate, program: Program, best_us: float | None) -> tuple[list[float], SizeCheck | None]:
        child, cfg = self.child, self.child.spec.tune
        runs = TimedRuns(self.state, trial, program, child.stream, SamplePlan(len(self.state.sets), 0))
        samples = timing.sample_trial(runs.run, child.stream, child.flusher, budget_s=cfg.trial_bench_budget_s,
                                     max_samples=cfg.trial_max_samples, best_us=best_us,
                                     stop_ratio=cfg.trial_stop_ratio, cut_ratio=cfg.trial_cut_ratio,
                                     before=runs.before, after=runs.after, hold=child.hold)
        synchronize(child.stream)
        return samples, runs.verdict()


class _Stages:
    """Wall time of the child's stages."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.spent = {"verify": 0.0, "tune": 0.0, "bench": 0.0}

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.spent[stage] += now - self.last
        self.last = now

    def stages(self) -> Stages:
        return Stages(self.spent["verify"], self.spent["tune"], self.spent["bench"])


def _space(cand: Candidate) -> int:
    return int(np.prod([len(t.values) for t in cand.tunables], dtype=np.int64)) if cand.tunables else 1


def _tunable_values(cand: Candidate) -> Defines:
    names = {t.name for t in cand.tunables}
    return tuple((k, v) for k, v in cand.resolved_defines() if k in names)


def _wrong(check: SizeCheck) -> str:
    return f"at {size_label(check.size)}: {check.detail}"


def main(conn: Any, spec: WorkerSpec, known: DeviceInfo | None) -> None:
    """The child's loop: answer requests until the pipe closes. A lost context ends the process
    after the reply, so the parent starts a fresh one."""
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:  # before any stream exists, so failure is quiet
            raise RuntimeError("no CUDA device visible")
        child = Child(spec, known)
    except Exception as e:  # no device, no driver: the parent reports it in one line
        from fsr.no_device import explain

        conn.send(("fatal", explain(e)))
        return
    conn.send(("ready", child.device))

    def note(text: str, deadline_s: float | None) -> None:
        conn.send(("note", text if deadline_s is None else (text, deadline_s)))

    child.note = note
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):  # the parent closed: finish what tuning left for the journal
            tune_module = sys.modules.get("fsr.tune")
            if tune_module is not None:
                tune_module.flush_journals(timeout_s=30.0)
            return
        try:
            if kind in ("ready", "fresh"):  # host work only: the comparator thread may hold the GPU meanwhile
                reply: Any = child.ready(payload) if kind == "ready" else child.fresh_ready(payload)
            else:
                with child.gate:
                    reply = child.prepare(*payload) if kind == "prepare" else \
                        child.certify(payload) if kind == "certify" else child.evaluate(payload)
            compared = child.beside.finished()
            if compared:
                conn.send(("compared", compared))
            conn.send(("ok", reply))
        except ContextLost as e:
            log.error("GPU child: %s", e, exc_info=True)
            conn.send(("crash", str(e)))
            os._exit(3)
        except Exception as e:  # one line to the parent: the candidate's crash or fsr's own fault
            log.error("GPU child: %s failed", kind, exc_info=True)  # the traceback to the worker's log
            conn.send(failure_reply(e))
            os._exit(4)
