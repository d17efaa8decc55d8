"""The evaluation pipeline for one GPU: header check, static guards, compile (here, no GPU
needed), then verify, tune and time in the child process, then the plausibility judgement.

Failures are values: `evaluate` returns a verdict for any candidate and never raises for one. A
failure of fsr's own machinery is no verdict: the GPU child reports it apart from a kernel's
crash, the request is sent once more to a fresh child, and a second failure raises
EvaluatorFault (fsr.types), which the executors treat as a fault of the worker.

Several evaluations may run at once (the worker actor takes eval.calls_per_worker calls): the host
stage of each (its compile and the compiles of its first tuning trials, on this process's
threads) runs while another holds the GPU child; only the child's part is serialised, by `_gpu`. Each evaluation's
`wall_s` is the worker time it adds: its own span less what an evaluation finished before it
already covered, so per-worker sums stay the worker's busy time.

The comparators' figures and `compare`, which answers for them after a campaign's last evaluation,
are the evaluator's part held in fsr.evaluate.compared.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path

from fsr import candidate as cfmt
from fsr import certification, tasks
from fsr.evaluate import PREPARE_TIMEOUT_S, READY_TIMEOUT_S, configurations, diagnose, host, judged
from fsr.evaluate.baselines import BaselineCompiles
from fsr.evaluate.compared import ComparatorRecord
from fsr.evaluate.compared import TaskTimes as _TaskTimes
from fsr.evaluate.compile import Compiled, CompileService
from fsr.evaluate.compile_pool import worker_compiler
from fsr.evaluate.judge import implausible, summarise
from fsr.evaluate.sandbox import Sandbox
from fsr.evaluate.static import static_stage, toolchain
from fsr.evaluate.trial_plan import compiled_trials, trial_compiles
from fsr.evaluate.turns import Turns
from fsr.evaluate.wire import (
    Certified,
    CertifyRequest,
    ChildResult,
    Died,
    EvalRequest,
    Faulted,
    TimedOut,
    TrialPrograms,
)
from fsr.evaluate.worker_time import WorkerTime
from fsr.types import (
    Candidate,
    DeviceInfo,
    Evaluation,
    EvaluatorFault,
    Task,
    Tier,
    Verdict,
    WorkerSpec,
)

log = logging.getLogger(__name__)

DEFAULT_ARCH = "sm_90"
READY_POLL_S = 0.05  # how often a call waiting for its task's host contents asks again


class GpuEvaluator(ComparatorRecord):
    """Evaluates candidates of any task on the local GPU (the one CUDA_VISIBLE_DEVICES shows)."""

    def __init__(self, spec: WorkerSpec, compiler: CompileService | None = None, beside: bool = False,
                 campaign: bool = False):
        """`spec`: the campaign's tasks (the only ones this evaluator takes), the configuration,
        the journal place, and `host_threads`, this worker's share of the host's cores for the
        GPU child's host work (0: every core, one worker per host); the GPU child builds the
        benchmark inputs and references of `spec.warm` as soon as it starts, all at once.
        `compiler`: the compile service to use (and close), else one built from `spec.eval`.
        `beside`: a task's comparators are timed beside its first candidates (a campaign: its
        first evaluations carry no comparator figures, later ones do) instead of before them
        (one evaluation that must report them: fsr eval, fsr explore). `campaign`: a campaign's
        worker, where a candidate whose program this evaluator judged before is answered from
        that judgement (fsr.evaluate.judged) and a candidate's timing races against its task's
        best this worker judged (timing.raced: stopped once clearly slower); without it every
        call is judged in full (fsr eval and its --repeat, studies of timing)."""
        threads = spec.host_threads or host.cores()
        # Certification's inputs are built ahead, from each task's preparation (with "end", once the
        # child's host has built the screening contents asked of it: Child.start_fresh), for a campaign's
        # worker only: one evaluation (fsr eval, fsr explore, a study) certifies nothing unless it
        # asks, and then builds them as it asks (fsr.evaluate.gpu.certify.fresh_inputs), so its
        # child spends no host thread on benchmark sets it will not use.
        ahead = spec.eval if campaign else replace(spec.eval, certify="off")
        self.spec = replace(spec, eval=ahead, host_threads=threads)
        self.cfg = spec.eval
        compile_threads = max(1, min(threads, 16))
        # Proposer code is compiled in bounded processes, never in this worker's own.
        # a campaign's compile processes start now: its first candidates all compile at once
        self.compiler = compiler or worker_compiler(self.cfg, compile_threads, start=campaign)
        self.sandbox = Sandbox(self.spec)
        self._gpu = Turns()  # the child: one request at a time (a baseline inside a prepare), certifications first
        self._compiles = ThreadPoolExecutor(compile_threads, thread_name_prefix="fsr-trials")
        # a campaign's baselines compile as soon as the GPU child names its arch (`device`)
        self._baselines = BaselineCompiles(self._compiles, self.compiler, spec.warmed() if campaign else ())
        self._worker_time = WorkerTime()
        self._times: dict[str, _TaskTimes] = {}
        self._prepared_in: dict[str, int] = {}  # task -> sandbox generation it was prepared in
        self._beside = beside
        self._compared: set[str] = set()  # tasks whose comparators are timed (or could not be)
        self._missed: dict[str, tuple[str, ...]] = {}  # task -> why a comparator of it has no figure
        self._asked: dict[str, int] = {}  # task -> sandbox generation asked to time them beside
        self._owed_s = 0.0  # the comparators' GPU seconds not yet charged to an evaluation
        self._owed_lock = threading.Lock()  # not the GPU lock: another candidate holds that while it runs
        self._toolchain = ""
        # what this worker judged, by the program that ran (none kept: every call judged)
        self._judged = judged.Judgements(judged.MAX_ENTRIES if campaign else 0)
        self._race = campaign
        self._best_us: dict[str, float] = {}  # task -> the fastest median this worker judged OK (racing)

    def device(self) -> DeviceInfo:
        with self._gpu:
            device = self.sandbox.ensure_started()
        self._baselines.start(device.arch)
        return device

    def evaluate(self, candidate: Candidate, tune: bool = True) -> Evaluation:
        """Judge one candidate. Its `wall_s` is the worker time it adds; its `setup_s`, the part of
        that spent waiting on setup (a GPU child's start, its task's preparation) rather than
        overlapping other evaluations: a wait for host contents while other candidates ran on the
        GPU is theirs, not preparation."""
        started = self._worker_time.begin()
        try:
            task = self._task(candidate.task)
        except tasks.TaskError as e:
            result = Evaluation(candidate.id, candidate.task, Verdict.REJECTED, str(e))
            setup_end = time.perf_counter()
        else:
            judge = self._certify if candidate.certify else partial(self._evaluate, tune=tune)
            try:
                result, setup_end = judge(candidate, task)
            except BaseException:  # fsr's own fault (EvaluatorFault) or a shutdown: no verdict
                self._worker_time.charge(started, time.perf_counter())
                raise
            result = replace(result, dtype=task.dtype)
        end = time.perf_counter()
        charged = self._worker_time.charge(started, end)
        # What it added past its setup is its own work; of the rest, only what no other evaluation
        # already covered is charged as preparing; and the GPU time comparators took beside it.
        setup_s = min(result.setup_s, max(0.0, charged - (end - setup_end)))
        with self._owed_lock:
            owed, self._owed_s = self._owed_s, 0.0
        total = min(charged, setup_s + owed)
        return replace(result, wall_s=charged, setup_s=total, comparators_s=min(owed, total))

    def close(self) -> None:
        self._compiles.shutdown(wait=False, cancel_futures=True)
        self.compiler.close()
        with self._gpu:
            self.sandbox.close()

    # -- internals ------------------------------------------------------------------------------
    def _evaluate(self, cand: Candidate, task: Task, tune: bool = True) -> tuple[Evaluation, float]:
        """The evaluation, and when its setup (the child's start, the task's preparation) ended."""
        clock = time.perf_counter()
        known = self.sandbox.device
        device = known if known is not None else self.device()  # the first call starts the GPU child
        setup_s = time.perf_counter() - clock
        trials = self.spec.tune.trials if tune else 0
        ahead = trial_compiles(cand, task, device.arch, trials, self.spec.tune.seed, self._compiles, self.compiler) if trials and cand.tunables else {}
        static = static_stage(cand, task, device.arch, self.compiler)
        if static.verdict is not None:
            for future, _ in ahead.values():
                future.cancel()
            return replace(static.verdict, device=device.name, setup_s=setup_s), clock + setup_s
        compiled = static.compiled
        assert compiled is not None
        if task.name not in self._times:  # its first preparation judges its baseline: done before the
            setup_s += self._prepare_first(task, device.arch)  # claim, so the baseline itself is answered
        judgement = judged.key(cand, compiled, trials)
        earlier = self._judged.claim(judgement)  # the same program judged before: no GPU time
        if earlier is not None:
            for future, _ in ahead.values():
                future.cancel()
            basis = self._times.get(task.name)  # the baseline's own judgement was made before its time was known
            answer = replace(judged.answer(earlier, cand, compiled.seconds), setup_s=setup_s)
            return replace(answer, baseline_us=basis.baseline_us) if basis else answer, clock + setup_s
        try:
            result = self._on_gpu(cand, task, compiled, compiled_trials(ahead), trials, setup_s)
        except BaseException:
            self._judged.abandon(judgement)
            raise
        self._judged.settle(judgement, result[0])
        return result

    def _certify(self, cand: Candidate, task: Task) -> tuple[Evaluation, float]:
        """A certification request judged (fsr.evaluate.gpu.certify): compiled at its (tuned)
        defines, then checked and timed by the GPU child on inputs from entropy; never answered
        from an earlier judgement. The verdict is OK (certified) or UNCERTIFIED with the set or
        check that failed; the paired timing bound is the caller's (fsr.certification.judge)."""
        clock = time.perf_counter()
        device = self.sandbox.device or self.device()
        setup_s = time.perf_counter() - clock
        base = Evaluation(cand.id, task.name, Verdict.OK, device=device.name, toolchain=self._toolchain_once(),
                          tuned_defines=cand.resolved_defines(), tier=Tier.CERTIFY, setup_s=setup_s)
        static = static_stage(cand, task, device.arch, self.compiler)
        if static.verdict is not None:
            first = static.verdict.message.strip().splitlines()[:1]
            return certification.failure(base, "compile", first[0] if first else "", static.verdict.verdict), \
                clock + setup_s
        compiled = static.compiled
        assert compiled is not None
        setup_s += self._await_contents(task) + self._await_fresh(task)
        with self._gpu.urgent():
            clock = time.perf_counter()
            device = self.sandbox.ensure_started()
            self._prepare(task)
            setup_end = time.perf_counter()
            request = CertifyRequest(cand, compiled.cubin, compiled.lowered)
            reply = self._call_evaluate(cand, task, request, self.cfg.timeout_s, kind="certify")
            times = self._take_compared(task)
        base = replace(base, resources=compiled.resources, compile_s=compiled.seconds, baseline_us=times.baseline_us,
                       library_us=times.library_us, torch_us=times.torch_us, torch_compile_us=times.torch_compile_us,
                       torch_compile_s=times.torch_compile_s, setup_s=setup_s + setup_end - clock)
        return self._certified(base, reply, task, device), setup_end

    def _certified(self, base: Evaluation, reply: object, task: Task, device: DeviceInfo) -> Evaluation:
        """The certification's Evaluation from the GPU child's reply."""
        if isinstance(reply, TimedOut):
            return certification.failure(base, "timeout", f"still running after {reply.seconds:.1f} s; the GPU "
                                         "child was killed and replaced", Verdict.TIMEOUT)
        if isinstance(reply, Died):
            return certification.failure(base, "crash", reply.reason, Verdict.CRASH)
        assert isinstance(reply, Certified)
        base = replace(base, checks=reply.checks, verify_s=reply.stages.verify_s, bench_s=reply.stages.bench_s,
                       resources=reply.resources or base.resources, certify_seeds=reply.seeds)
        if reply.verdict != Verdict.OK:
            return certification.failure(base, reply.failed_check, reply.message, reply.verdict)
        sizes = dict(task.bench_size)
        timing = summarise(list(reply.samples_us), tasks.bytes_moved(task, sizes), tasks.flops(task, sizes), device,
                           task.dtype)
        reason = implausible(timing, device, self.cfg, task.dtype)
        if reason:
            return certification.failure(base, "plausibility", reason, Verdict.SUSPECT)
        control = statistics.median(reply.control_us) if reply.control_us else None
        return replace(base, timing=timing, certified=True, control_us=control)

    def _on_gpu(self, cand: Candidate, task: Task, compiled: Compiled, programs: TrialPrograms, trials: int,
                setup_s: float) -> tuple[Evaluation, float]:
        """The GPU child's judgement of a compiled candidate (tuned with `trials` trials, from
        `programs` compiled ahead), and when its setup ended; `setup_s` so far."""
        setup_s += self._await_contents(task)
        with self._gpu:
            clock = time.perf_counter()
            device = self.sandbox.ensure_started()  # after a CRASH, a new child
            times = self._prepare_once_more(task)
            setup_end = time.perf_counter()
            setup_s += setup_end - clock
            journal_dir = self.spec.journal_dir
            journal = str(Path(journal_dir) / "optuna.journal") if journal_dir and trials else None
            race_us = self._best_us.get(task.name) if self._race else None
            request = EvalRequest(cand, compiled.cubin, compiled.lowered, trials, journal_path=journal,
                                  programs=programs, race_us=race_us)
            timeout = self.cfg.timeout_s + (self.spec.tune.time_budget_s if trials else 0.0)

            def attempt(failed: configurations.Failed) -> object:
                """After a hang or a crash in one configuration: a new child, the task loaded."""
                return self._call_evaluate(cand, task, replace(request, failed=failed), timeout)

            reply, failed = configurations.with_retries(attempt, {t.name for t in cand.tunables} if trials else set())
            times = self._take_compared(task)
        base = Evaluation(cand.id, task.name, Verdict.OK, resources=compiled.resources, device=device.name,
                          toolchain=self._toolchain_once(), compile_s=compiled.seconds,
                          baseline_us=times.baseline_us, library_us=times.library_us, torch_us=times.torch_us,
                          torch_compile_us=times.torch_compile_us, torch_compile_s=times.torch_compile_s,
                          setup_s=setup_s)
        if isinstance(reply, TimedOut):
            during = f" (during {reply.doing})" if reply.doing else ""
            return configurations.noting(replace(base, verdict=Verdict.TIMEOUT, message=f"still running after {reply.seconds:.1f} s"
                                   f"{during}; the GPU child was killed and replaced"), failed), setup_end
        if isinstance(reply, Died):
            return configurations.noting(replace(base, verdict=Verdict.CRASH, message=reply.reason), failed), setup_end
        assert isinstance(reply, ChildResult)
        out = self._judge(base, reply, task, device)
        if out.verdict == Verdict.OK and out.timing is not None and not out.cut_short:
            self._best_us[task.name] = min(out.timing.median_us, self._best_us.get(task.name, float("inf")))
        diagnostics = diagnose.of_evaluation(cand, compiled, out, task, device, self.compiler)
        return configurations.noting(replace(out, diagnostics=diagnostics), failed), setup_end

    def _prepare_first(self, task: Task, arch: str) -> float:
        """Seconds spent preparing a task not yet prepared by this evaluator, in a GPU turn of its
        own, its baseline compiled and its host contents built before it (neither holds the GPU)."""
        started = time.perf_counter()
        self._baselines.wait(task, arch)
        self._await_contents(task)
        with self._gpu:
            self.sandbox.ensure_started()
            self._prepare_once_more(task)
        return time.perf_counter() - started

    def _prepare_once_more(self, task: Task) -> _TaskTimes:
        """`_prepare`, once more in a fresh GPU child where fsr's own code failed in the first (gone
        with it); the caller holds the GPU."""
        try:
            return self._prepare(task)
        except EvaluatorFault as e:
            log.warning("%s (try 1 of 2, each in a fresh GPU child)", e)
            self.sandbox.ensure_started()
            return self._prepare(task)

    def _call_evaluate(self, cand: Candidate, task: Task, request: EvalRequest | CertifyRequest, timeout: float,
                       kind: str = "evaluate") -> object:
        """The child's reply to `request` (a result, or Died / TimedOut: the candidate's), sent
        again to a fresh child once when fsr's own code failed in the first (Faulted, or the task
        could not be prepared); EvaluatorFault when it failed in the second too. `kind`:
        "evaluate", or "certify" for a CertifyRequest."""
        for tries in (1, 2):
            try:
                self.sandbox.ensure_started()
                self._prepare(task)
                reply = self.sandbox.call(kind, request, timeout)
            except EvaluatorFault as e:
                reply = Faulted(str(e))
            if not isinstance(reply, Faulted):
                return reply
            log.warning("candidate %s: %s (try %d of 2, each in a fresh GPU child)", cand.id, reply.reason, tries)
        raise EvaluatorFault(f"candidate {cand.id}: fsr's own code failed in the GPU child twice, each time in a "
                             f"fresh child; no verdict on the candidate: {reply.reason}")

    def _judge(self, base: Evaluation, reply: ChildResult, task: Task, device: DeviceInfo) -> Evaluation:
        resources = base.resources
        if reply.resources is not None:  # the driver's figures for the program that ran
            resources = replace(reply.resources, spill_bytes=max(reply.resources.spill_bytes,
                                                                  base.resources.spill_bytes))
        out = replace(base, verdict=reply.verdict, message=reply.message, checks=reply.checks,
                      resources=resources, tuned_defines=reply.defines,
                      tune_trials=len(reply.trials), trials=reply.trials, verify_s=reply.stages.verify_s,
                      tune_s=reply.stages.tune_s, bench_s=reply.stages.bench_s, cut_short=reply.cut_short)
        if reply.verdict != Verdict.OK:
            return out
        sizes = dict(task.bench_size)
        timing = summarise(list(reply.samples_us), tasks.bytes_moved(task, sizes), tasks.flops(task, sizes), device,
                           task.dtype)
        out = replace(out, timing=timing)
        reason = implausible(timing, device, self.cfg, task.dtype)
        return replace(out, verdict=Verdict.SUSPECT, message=reason) if reason else out

    def _task(self, name: str) -> Task:
        """The campaign's task of this name; TaskError for another (the candidate is REJECTED)."""
        task = self.spec.task(name)
        if task is None:
            known = ", ".join(t.name for t in self.spec.tasks) or "none"
            raise tasks.TaskError(f"task {name!r} is not one of this evaluator's tasks ({known})")
        return task

    def _await_contents(self, task: Task) -> float:
        """Seconds waited until the GPU child can prepare `task` at once (prepared already, or its
        host contents built): the child builds them in the background while this call lets go of
        it between questions, so other candidates run on the GPU meanwhile."""
        started = time.perf_counter()
        if self._prepared_in.get(task.name) == self.sandbox.restarts:
            return 0.0  # prepared: no question, and no wait for the GPU child charged as preparing
        while time.perf_counter() - started < PREPARE_TIMEOUT_S:
            with self._gpu:
                self.sandbox.ensure_started()
                if self._prepared_in.get(task.name) == self.sandbox.restarts:
                    break
                reply = self.sandbox.call("ready", task.name, READY_TIMEOUT_S)
            if reply is not False:  # ready, or a failure that the preparation itself will meet
                break
            time.sleep(READY_POLL_S)
        return time.perf_counter() - started

    def _await_fresh(self, task: Task) -> float:
        """Seconds waited until the GPU child holds a fresh benchmark set of `task` for a
        certification (built on its host threads from the task's preparation): asked between
        other candidates' turns on the GPU, as `_await_contents` asks, so a certification does
        not hold the GPU while a float64 reference is computed."""
        started = time.perf_counter()
        while time.perf_counter() - started < PREPARE_TIMEOUT_S:
            with self._gpu.urgent():
                self.sandbox.ensure_started()
                self._prepare(task)
                reply = self.sandbox.call("fresh", task.name, READY_TIMEOUT_S)
            if reply is not False:  # built, or a failure the certification itself will meet
                break
            time.sleep(READY_POLL_S)
        return time.perf_counter() - started

    def _prepare(self, task: Task) -> _TaskTimes:
        """Load the task in the current child; time its baseline once per evaluator."""
        if self._prepared_in.get(task.name) != self.sandbox.restarts:
            started = time.perf_counter()
            first = task.name not in self._times
            reply = self.sandbox.call("prepare", (task.name, self._comparators(task)), PREPARE_TIMEOUT_S)
            if isinstance(reply, (Died, Faulted, TimedOut)):  # no candidate ran: fsr's own fault
                raise EvaluatorFault(f"task {task.name}: preparing its inputs failed: {reply}")
            self._prepared_in[task.name] = self.sandbox.restarts
            for name in reply.evicted:  # dropped in the child to make room: prepared again when needed
                self._prepared_in.pop(name, None)
            if first:
                times = _TaskTimes(None, reply.library_us, reply.torch_us, reply.torch_compile_us,
                                   reply.torch_compile_s)
                self._times[task.name] = times  # the baseline's own evaluation reads them
                if task.baseline_source.strip():  # else speedups read against PyTorch eager
                    try:
                        self._times[task.name] = replace(times, baseline_us=self._baseline_us(task))
                    except BaseException:  # timed again by the next preparation
                        self._times.pop(task.name, None)
                        raise
            log.info("task %s prepared in %.2f s: inputs and references %.2f s, uploads and comparators "
                     "%.2f s, baseline %.2f s", task.name, time.perf_counter() - started, reply.host_s,
                     reply.device_s, time.perf_counter() - started - reply.host_s - reply.device_s)
        return self._times[task.name]

    def _baseline_us(self, task: Task) -> float:
        baseline, _ = self._evaluate(cfmt.parse(task.baseline_source, task), task, tune=False)
        if baseline.verdict != Verdict.OK or baseline.timing is None:
            raise RuntimeError(f"task {task.name}: its baseline kernel is {baseline.verdict}: "
                               f"{baseline.message[:500]}")
        return baseline.timing.median_us

    def _toolchain_once(self) -> str:
        if not self._toolchain:
            self._toolchain = toolchain()
        return self._toolchain
