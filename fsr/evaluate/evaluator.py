"""The evaluation pipeline for one GPU: header check, static guards, compile (here, no GPU
needed), then verify, tune and time in the child process, then the plausibility judgement.

Failures are values: `evaluate` returns a verdict for any candidate and never raises for one.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from fsr import candidate as cfmt
from fsr import tasks
from fsr.config import Config
from fsr.evaluate import guards
from fsr.evaluate.compile import Compiled, CompileFailed, compile_candidate, nvrtc_version
from fsr.evaluate.judge import implausible, summarise
from fsr.evaluate.sandbox import Died, Sandbox, TimedOut
from fsr.types import Candidate, DeviceInfo, Evaluation, Task, Verdict

log = logging.getLogger(__name__)

DEFAULT_ARCH = "sm_90"
PREPARE_TIMEOUT_S = 600.0  # a task's benchmark inputs and float64 references, built once per child


@dataclass(frozen=True)
class Static:
    """What can be known without a GPU: a verdict already, or the compiled program."""

    verdict: Evaluation | None
    compiled: Compiled | None


def static_stage(cand: Candidate, task: Task, arch: str) -> Static:
    """Header check, guards and compile; a REJECTED/COMPILE_ERROR Evaluation or the cubin."""
    try:
        cfmt.check(cand, task)
    except cfmt.HeaderError as e:
        return Static(Evaluation(cand.id, cand.task, Verdict.REJECTED, f"header: {e}"), None)
    reason = guards.check(cand)
    if reason:
        return Static(Evaluation(cand.id, cand.task, Verdict.REJECTED, reason), None)
    try:
        compiled = compile_candidate(cand, arch)
    except CompileFailed as e:
        return Static(Evaluation(cand.id, cand.task, Verdict.COMPILE_ERROR, e.log), None)
    return Static(None, compiled)


def toolchain() -> str:
    try:
        cupy_version = importlib.metadata.version("cupy-cuda13x")
    except importlib.metadata.PackageNotFoundError:
        cupy_version = "?"
    return f"{nvrtc_version()}; cupy {cupy_version}"


@dataclass
class _TaskTimes:
    baseline_us: float
    library_us: float | None
    torch_us: float | None = None


class GpuEvaluator:
    """Evaluates candidates of any task on the local GPU (the one CUDA_VISIBLE_DEVICES shows)."""

    def __init__(self, config: Config | None = None, tasks_root: str | None = None, journal_dir: str | None = None,
                 host_threads: int | None = None, warm: Sequence[str] = ()):
        """`host_threads`: this worker's share of the host's cores, for the GPU child's host work
        (`config.eval.host_threads` wins when set; default: every core, one worker per host).
        `warm`: the tasks this evaluator will see (a campaign's); the GPU child builds their
        benchmark inputs and references as soon as it starts, all at once."""
        self.cfg = config or Config()
        self.tasks_root = tasks_root
        self.journal_dir = journal_dir
        threads = self.cfg.eval.host_threads or host_threads or os.cpu_count() or 1
        self.sandbox = Sandbox(tasks_root, self.cfg.eval, self.cfg.tune, host_threads=threads, warm=warm)
        self._tasks: dict[str, Task] = {}
        self._times: dict[str, _TaskTimes] = {}
        self._prepared_in: dict[str, int] = {}  # task -> sandbox generation it was prepared in
        self._toolchain = ""

    def device(self) -> DeviceInfo:
        return self.sandbox.ensure_started()

    def evaluate(self, candidate: Candidate, tune: bool = True) -> Evaluation:
        started = time.perf_counter()
        try:
            task = self._task(candidate.task)
        except tasks.TaskError as e:
            return Evaluation(candidate.id, candidate.task, Verdict.REJECTED, str(e))
        result = self._evaluate(candidate, task, tune)
        return replace(result, wall_s=time.perf_counter() - started)

    def close(self) -> None:
        self.sandbox.close()

    # -- internals ------------------------------------------------------------------------------
    def _evaluate(self, cand: Candidate, task: Task, tune: bool) -> Evaluation:
        clock = time.perf_counter()
        device = self.device()  # starts the GPU child if it is not running (first call, after a CRASH)
        setup_s = time.perf_counter() - clock
        trials = self.cfg.tune.trials if tune else 0
        if trials and cand.tunables and task.name in self._times:  # the child compiles trials meanwhile
            self.sandbox.post("prefetch", (cand, trials, ()))
        static = static_stage(cand, task, device.arch)
        if static.verdict is not None:
            return replace(static.verdict, device=device.name, setup_s=setup_s)
        compiled = static.compiled
        assert compiled is not None
        clock = time.perf_counter()
        times = self._prepare(task)
        setup_s += time.perf_counter() - clock
        journal = str(Path(self.journal_dir) / "optuna.journal") if self.journal_dir and trials else None
        from fsr.evaluate.child import ChildResult, EvalRequest

        request = EvalRequest(cand, compiled.cubin, compiled.lowered, trials, journal_path=journal)
        timeout = self.cfg.eval.timeout_s + (self.cfg.tune.time_budget_s if trials else 0.0)
        reply = self.sandbox.call("evaluate", request, timeout)
        base = Evaluation(cand.id, task.name, Verdict.OK, resources=compiled.resources, device=device.name,
                          toolchain=self._toolchain_once(), compile_s=compiled.seconds,
                          baseline_us=times.baseline_us, library_us=times.library_us, torch_us=times.torch_us,
                          setup_s=setup_s)
        if isinstance(reply, TimedOut):
            return replace(base, verdict=Verdict.TIMEOUT,
                           message=f"still running after {reply.seconds:.1f} s; the GPU child was killed and replaced")
        if isinstance(reply, Died):
            return replace(base, verdict=Verdict.CRASH, message=reply.reason)
        assert isinstance(reply, ChildResult)
        return self._judge(base, reply, task, device)

    def _judge(self, base: Evaluation, reply: object, task: Task, device: DeviceInfo) -> Evaluation:
        from fsr.evaluate.child import ChildResult

        assert isinstance(reply, ChildResult)
        resources = base.resources
        if reply.resources is not None:  # the driver's figures for the program that ran
            resources = replace(reply.resources, spill_bytes=max(reply.resources.spill_bytes,
                                                                  base.resources.spill_bytes))
        out = replace(base, verdict=reply.verdict, message=reply.message, checks=reply.checks,
                      resources=resources, tuned_defines=reply.defines,
                      tune_trials=len(reply.trials), trials=reply.trials, verify_s=reply.stages_s[0],
                      tune_s=reply.stages_s[1], bench_s=reply.stages_s[2])
        if reply.verdict != Verdict.OK:
            return out
        sizes = dict(task.bench_size)
        timing = summarise(list(reply.samples_us), tasks.bytes_moved(task, sizes), tasks.flops(task, sizes), device)
        out = replace(out, timing=timing)
        reason = implausible(timing, device, self.cfg.eval)
        return replace(out, verdict=Verdict.SUSPECT, message=reason) if reason else out

    def _task(self, name: str) -> Task:
        if name not in self._tasks:
            self._tasks[name] = tasks.load(name, self.tasks_root)
        return self._tasks[name]

    def _prepare(self, task: Task) -> _TaskTimes:
        """Load the task in the current child; time its baseline once per evaluator."""
        if self._prepared_in.get(task.name) != self.sandbox.restarts:
            started = time.perf_counter()
            first = task.name not in self._times  # comparators are timed once per evaluator
            reply = self.sandbox.call("prepare", (task.name, first), PREPARE_TIMEOUT_S)
            if isinstance(reply, (Died, TimedOut)):
                raise RuntimeError(f"task {task.name}: preparing its inputs failed: {reply}")
            self._prepared_in[task.name] = self.sandbox.restarts
            library_us, torch_us = reply.library_us, reply.torch_us
            if first:
                self._times[task.name] = _TaskTimes(0.0, library_us, torch_us)
                baseline = self._evaluate(cfmt.parse(task.baseline_source, task), task, tune=False)
                if baseline.verdict != Verdict.OK or baseline.timing is None:
                    del self._times[task.name]
                    raise RuntimeError(f"task {task.name}: its baseline kernel is {baseline.verdict}: "
                                       f"{baseline.message[:500]}")
                self._times[task.name] = _TaskTimes(baseline.timing.median_us, library_us, torch_us)
            log.info("task %s prepared in %.2f s: inputs and references %.2f s, uploads and comparators "
                     "%.2f s, baseline %.2f s", task.name, time.perf_counter() - started, reply.host_s,
                     reply.device_s, time.perf_counter() - started - reply.host_s - reply.device_s)
        return self._times[task.name]

    def _toolchain_once(self) -> str:
        if not self._toolchain:
            self._toolchain = toolchain()
        return self._toolchain
