"""The evaluator's child process: owns the CUDA context, verifies, tunes and times candidates.

It is started once per evaluator (a CUDA context costs seconds) and replaced only when a kernel
breaks the context or hangs. Requests and replies are the frozen records below, over a pipe.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import cupy as cp
import cupyx
import numpy as np

from fsr import tasks
from fsr.config import EvalConfig, TuneConfig
from fsr.evaluate import bench, tuning
from fsr.evaluate.compile import use_disk_cache
from fsr.evaluate.verify import (
    Buffers,
    ContextLost,
    Expected,
    LaunchRefused,
    Program,
    check_size,
    compare,
    crash_line,
    enqueue,
    expect,
    is_context_error,
    launch_all,
    make_buffers,
    plan,
    scratch_buffers,
    synchronize,
)
from fsr.types import (
    Candidate,
    Defines,
    DeviceInfo,
    Resources,
    SizeCheck,
    Task,
    TrialRecord,
    Verdict,
    size_label,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalRequest:
    candidate: Candidate
    cubin: bytes
    lowered: tuple[tuple[str, str], ...]
    tune_trials: int = 0
    start_defines: Defines = ()
    journal_path: str | None = None
    programs: tuple[tuple[Defines, bytes, tuple[tuple[str, str], ...], Resources], ...] = ()  # trials compiled ahead by the parent


@dataclass(frozen=True)
class ChildResult:
    verdict: Verdict
    message: str = ""
    checks: tuple[SizeCheck, ...] = ()
    samples_us: tuple[float, ...] = ()
    defines: Defines = ()
    resources: Resources | None = None  # set when tuning picked values other than the request's
    trials: tuple[TrialRecord, ...] = ()
    stages_s: tuple[float, float, float] = (0.0, 0.0, 0.0)  # verify, tune, bench (timing + recheck)


@dataclass(frozen=True)
class Prepared:
    """A task loaded in the child: the library's and PyTorch eager's medians at the benchmark
    size (None where the task has no such comparator or it could not run), and where the
    preparation's time went (host: inputs and float64 references; device: uploads and the
    comparators' timing), so a slow start can be told apart from slow candidates."""

    library_us: float | None
    host_s: float = 0.0
    device_s: float = 0.0
    torch_us: float | None = None


Content = tuple[dict[str, np.ndarray], dict[str, Expected]]  # inputs, and the expected outputs


def make_content(task: Task, module: Any, dtypes: dict[str, str], size: dict[str, int],
                 rng: np.random.Generator) -> Content:
    """Fresh inputs at one size and the reference's outputs for them (the reference gets copies:
    it may not change what the kernel will see)."""
    inputs = module.make_inputs(dict(size), rng)
    reference = module.reference({k: v.copy() for k, v in inputs.items()}, dict(size))
    return inputs, {k: expect(v, dtypes[k], task.atol, task.rtol) for k, v in reference.items()}


@dataclass
class BenchSet:
    """Device buffers at the benchmark size, and which of the task's benchmark contents they hold."""

    buffers: Buffers
    content: int


@dataclass
class TaskState:
    task: Task
    pool: InputPool
    contents: list[Content] = field(default_factory=list)
    sets: list[BenchSet] = field(default_factory=list)
    pinned: dict[str, np.ndarray] = field(default_factory=dict)

    def landing(self, name: str, like: cp.ndarray) -> np.ndarray:
        """A pinned host array for output `name` at the benchmark size (copies back at full
        bus speed; pageable memory is staged through a bounce buffer)."""
        if name not in self.pinned:
            self.pinned[name] = cupyx.empty_pinned(like.shape, like.dtype)
        return self.pinned[name]


class InputPool:
    """Fresh inputs and references for every test size, made ahead by a thread so the host's
    reference work overlaps the GPU's. Each item is used once."""

    def __init__(self, task: Task, seed: int, depth: int = 2):
        self.task = task
        self.sizes = task.test_sizes
        self.depths = [depth] * len(task.test_sizes)
        self.module = tasks.functions(task)
        self.items: list[list[Content]] = [[] for _ in self.sizes]
        self.cond = threading.Condition()
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, int(task.content_hash, 16)]))
        threading.Thread(target=self._fill, daemon=True, name=f"inputs-{task.name}").start()

    def make(self, size: dict[str, int], rng: np.random.Generator) -> Content:
        return make_content(self.task, self.module, {a.name: a.dtype for a in self.task.outputs}, size, rng)

    def take(self, index: int) -> Content:
        with self.cond:
            while not self.items[index]:
                self.cond.wait()
            item = self.items[index].pop(0)
            self.cond.notify_all()
            return item

    def _fill(self) -> None:
        while True:
            with self.cond:
                while all(len(q) >= d for q, d in zip(self.items, self.depths, strict=True)):
                    self.cond.wait()
                index = min(range(len(self.items)), key=lambda i: len(self.items[i]) / self.depths[i])
            item = self.make(dict(self.sizes[index]), self.rng)
            with self.cond:
                self.items[index].append(item)
                self.cond.notify_all()


class Child:
    """Everything the child holds: device, stream, flusher, per-task inputs."""

    def __init__(self, tasks_root: str | None, eval_cfg: EvalConfig, tune_cfg: TuneConfig,
                 known: DeviceInfo | None, warm: Sequence[str] = ()):
        """`warm`: tasks whose benchmark contents are built on host threads from the start, all
        at once, so a campaign's later tasks are ready when their first candidate arrives. A
        child replacing a crashed one (`known` set) builds them one at a time instead: the task
        a request needs is then built at once by `prepare` if its turn has not come, rather than
        sharing the host with every other task's rebuild."""
        self.tasks_root, self.cfg, self.tune_cfg = tasks_root, eval_cfg, tune_cfg
        use_disk_cache(eval_cfg.compile_cache_dir, eval_cfg.compile_cache_max_bytes)  # trials compile here too
        self.building: dict[str, Future[list[Content]]] = {}
        if warm:
            builder = ThreadPoolExecutor(len(warm) if known is None else 1, thread_name_prefix="warm")
            for name in dict.fromkeys(warm):
                try:
                    self.building[name] = builder.submit(self._contents, tasks.load(name, tasks_root))
                except tasks.TaskError:
                    pass  # reported when a candidate of it arrives
            builder.shutdown(wait=False)
        if known is None:  # the first child times the PyTorch comparators: import it meanwhile
            _import_torch_soon()
        self.stream = cp.cuda.Stream(non_blocking=True)
        info = bench.device_info(eval_cfg.arch)
        self.hold = bench.Hold()
        if known is None or known.name != info.name:
            ceilings = {field: measure(self.stream, self.hold) for field, measure in bench.CEILINGS.items()}
        else:
            ceilings = {field: getattr(known, field) for field in bench.CEILINGS}
        info = replace(info, **ceilings)  # type: ignore[arg-type]  # the keys are DeviceInfo float fields
        self.device = info
        self.flusher = bench.L2Flusher(info.l2_bytes)
        self.tasks: dict[str, TaskState] = {}
        self.note: Callable[[str], None] = lambda _: None  # tells the parent what runs now

    # -- requests ---------------------------------------------------------------------------
    def prepare(self, name: str, comparators: bool = True) -> Prepared:
        """Load a task: the input pool, the benchmark input sets and their references (built
        ahead if the task was named in `warm`), uploaded; then, with `comparators`, the library
        and PyTorch eager timed (a child that replaces a crashed one need not time them again)."""
        started = time.perf_counter()
        task = tasks.load(name, self.tasks_root)
        state = TaskState(task, InputPool(task, self.cfg.seed))
        ahead = self.building.pop(name, None)
        if ahead is not None and ahead.cancel():  # not started yet: build it now, first
            ahead = None
        state.contents = ahead.result() if ahead is not None else self._contents(task)
        host_s = time.perf_counter() - started
        size = dict(task.bench_size)
        state.sets = [BenchSet(make_buffers(task, _no_scratch(task), size, inputs), i)
                      for i, (inputs, _) in enumerate(state.contents)]
        self.tasks[name] = state
        library_us = self._library_us(state) if comparators and task.has_library else None
        torch_us = self._torch_us(state) if comparators else None
        return Prepared(library_us, host_s, time.perf_counter() - started - host_s, torch_us)

    def task(self, name: str) -> Task:
        """A task this child has prepared, else loaded from disk."""
        state = self.tasks.get(name)
        return state.task if state is not None else tasks.load(name, self.tasks_root)

    def _contents(self, task: Task) -> list[Content]:
        """The task's benchmark input sets and their references, one thread per set (NumPy
        releases the GIL in its array work; float64 references over the whole benchmark size
        are the largest host cost of a worker's start); each set draws from its own child of
        the task's seed sequence, so every worker holds the same sets."""
        count = max(self.cfg.input_sets, 2)
        seeds = np.random.SeedSequence([self.cfg.seed, 1, int(task.content_hash, 16)]).spawn(count)
        size, module, dtypes = dict(task.bench_size), tasks.functions(task), {a.name: a.dtype for a in task.outputs}

        def build(seed: np.random.SeedSequence) -> Content:
            return make_content(task, module, dtypes, size, np.random.default_rng(seed))

        with ThreadPoolExecutor(count, thread_name_prefix=f"bench-{task.name}") as pool:
            return list(pool.map(build, seeds))

    def evaluate(self, req: EvalRequest) -> ChildResult:
        state = self.tasks[req.candidate.task]
        cand, program = req.candidate, Program(req.cubin, req.lowered)
        trials: tuple[Any, ...] = ()
        resources = None
        per_run_s: float | None = None  # the timed configuration's time per run, from its tuning trial
        clock = _Stages()
        if req.tune_trials > 0 and _space(cand) > 1:
            tuned = tuning.run(self, state, cand, req)
            trials = tuned.trials
            if tuned.best_us:  # set only when a configuration won
                per_run_s = tuned.best_us * 1e-6
            if tuned.candidate is not None and tuned.program is not None and tuned.resources is not None:
                cand, program, resources = tuned.candidate, tuned.program, tuned.resources  # as measured in tuning
        clock.lap("tune")
        if trials:
            names = {t.name for t in cand.tunables}
            self.note("checks and timing of the tuned " + " ".join(f"{k}={v}" for k, v in cand.resolved_defines() if k in names))
        resources = program.resources(resources)
        done = partial(ChildResult, defines=cand.resolved_defines(), resources=resources, trials=trials)
        try:
            checks = self._verify(state, cand, program, range(len(state.task.test_sizes)))
            clock.lap("verify")
            if not checks[-1].passed:
                return done(Verdict.WRONG, _wrong(checks[-1]), checks, stages_s=clock.stages())
            samples = self._time(state, cand, program, self.cfg.bench_budget_s, self.cfg.bench_min_samples, per_run_s)
            recheck = self._recheck(state, cand, program)
            clock.lap("bench")
        except LaunchRefused as e:
            clock.lap("verify")
            return done(Verdict.LAUNCH_ERROR, str(e), stages_s=clock.stages())
        if not recheck.passed:
            return done(Verdict.WRONG, "after timing, new inputs under the same buffers gave a wrong result "
                        f"(results cached in device memory?): {_wrong(recheck)}", checks + (recheck,),
                        tuple(samples), stages_s=clock.stages())
        return done(Verdict.OK, "", checks + (recheck,), tuple(samples), stages_s=clock.stages())

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
              min_samples: int, per_run_s: float | None = None) -> list[float]:
        run, before = bench_launches(state, cand, program, self.stream)
        samples = bench.sample(run, self.stream, self.flusher, budget_s=budget_s, min_samples=min_samples,
                               max_samples=self.cfg.bench_max_samples, warmup_s=self.cfg.warmup_s, before=before,
                               hold=self.hold, rel_error=self.cfg.bench_rel_error, per_run_s=per_run_s)
        synchronize(self.stream)
        return samples

    def _recheck(self, state: TaskState, cand: Candidate, program: Program) -> SizeCheck:
        """Other contents under the timing buffers of set 0 must give their own answer, not the
        one computed there during timing (defeats results cached in device memory by pointer).
        The contents come from another set's buffers (a device copy); set 0 keeps them. All in
        order on the child's stream; outputs come back through pinned host memory."""
        first = state.sets[0]
        content = (first.content + 1) % len(state.contents)
        inputs, expected = state.contents[content]
        source = next((s for s in state.sets if s.content == content), None)
        size = dict(state.task.bench_size)
        with self.stream:
            for name, g in first.buffers.inputs.items():
                if source is not None:
                    g.array[...] = source.buffers.inputs[name].array
                else:
                    g.array.set(inputs[name])
            first.content = content
            first.buffers.reset(_no_scratch(state.task))
            scratch = scratch_buffers(cand, size)
            for s in cand.scratch:
                scratch[s.name].fill(0 if s.zero else 0xFF)
            arrays = {k: g.array for k, g in (first.buffers.inputs | first.buffers.outputs | scratch).items()}
            launch_all(program, cand, state.task, size, arrays, self.stream)
            synchronize(self.stream)
            for name, g in first.buffers.outputs.items():
                ok, err, detail = compare(name, g.array.get(out=state.landing(name, g.array)), expected[name])
                if not ok:
                    return SizeCheck(state.task.bench_size, False, err, detail)
        return SizeCheck(state.task.bench_size, True)

    def _library_us(self, state: TaskState) -> float | None:
        fn = tasks.functions(state.task).library

        def call(inputs: dict[str, cp.ndarray], size: dict[str, int]) -> None:
            with self.stream:
                fn(inputs, size)

        return self._comparator_us(state, call)

    def _torch_us(self, state: TaskState) -> float | None:
        """PyTorch eager's median, timed like the library: on fsr's stream (as torch's current
        stream), TF32 off. None, logged once per task, when the task has no `torch_eager`,
        torch cannot be imported or the function raises: a missing comparator is no verdict."""
        fn = getattr(tasks.functions(state.task), "torch_eager", None)
        if fn is None:
            return None
        try:
            import torch

            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            torch_stream = torch.cuda.ExternalStream(self.stream.ptr)

            def call(inputs: dict[str, cp.ndarray], size: dict[str, int]) -> None:
                with torch.cuda.stream(torch_stream):
                    fn(inputs, size)

            return self._comparator_us(state, call)
        except ContextLost:
            raise
        except Exception as e:  # ImportError, or the task's function failed
            log.warning("task %s: PyTorch eager not timed (%s: %s)", state.task.name, type(e).__name__, e)
            synchronize(self.stream)
            return None

    def _comparator_us(self, state: TaskState, call: Any) -> float:
        """Median of `call(inputs, size)` over the benchmark input sets, fsr's timing protocol."""
        size = dict(state.task.bench_size)
        views = [{k: g.array for k, g in s.buffers.inputs.items()} for s in state.sets]

        def run(i: int) -> None:
            call(views[i % len(views)], size)

        samples = bench.sample(run, self.stream, self.flusher, budget_s=self.cfg.bench_budget_s,
                               min_samples=self.cfg.bench_min_samples, max_samples=self.cfg.bench_max_samples,
                               warmup_s=self.cfg.warmup_s, hold=self.hold, rel_error=self.cfg.bench_rel_error)
        return float(np.median(samples))


class _Stages:
    """Wall time of the child's stages."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.spent = {"verify": 0.0, "tune": 0.0, "bench": 0.0}

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.spent[stage] += now - self.last
        self.last = now

    def stages(self) -> tuple[float, float, float]:
        return self.spent["verify"], self.spent["tune"], self.spent["bench"]


def bench_launches(state: TaskState, cand: Candidate, program: Program, stream: cp.cuda.Stream
                   ) -> tuple[Callable[[int], None], Callable[[int], None]]:
    """For timing at the benchmark size: `run(i)` queues the candidate's launches on benchmark
    set i (rotating through the sets), `before(i)` clears its zeroed scratch buffers (outside the
    timed region). Raises LaunchRefused."""
    size = dict(state.task.bench_size)
    scratch = scratch_buffers(cand, size)
    plans = [plan(program, cand, state.task, size,
                  {k: g.array for k, g in (s.buffers.inputs | s.buffers.outputs | scratch).items()})
             for s in state.sets]
    zeroed = [scratch[s.name] for s in cand.scratch if s.zero]

    def run(i: int) -> None:
        enqueue(plans[i % len(plans)], stream)

    def before(_: int) -> None:
        for g in zeroed:
            cp.cuda.runtime.memsetAsync(g.array.data.ptr, 0, g.nbytes, stream.ptr)

    return run, before


def _space(cand: Candidate) -> int:
    return int(np.prod([len(t.values) for t in cand.tunables], dtype=np.int64)) if cand.tunables else 1


def _no_scratch(task: Task) -> Candidate:
    return Candidate(task=task.name, source="", launches=())


def _wrong(check: SizeCheck) -> str:
    return f"at {size_label(check.size)}: {check.detail}"


def _import_torch_soon() -> threading.Thread | None:
    """Import PyTorch on a thread, if it is installed: the first task's preparation times
    PyTorch eager, and the import (seconds) would otherwise wait for it on the way to the
    worker's first result; here it overlaps the ceilings and the references. A later `import
    torch` waits for this one to finish (Python's import lock); a failed import is reported there.
    Returns the thread (None when PyTorch is not installed)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return None

    def run() -> None:
        try:
            import torch  # noqa: F401
        except Exception:  # _torch_us imports again and logs why
            pass

    thread = threading.Thread(target=run, daemon=True, name="import-torch")
    thread.start()
    return thread


def main(conn: Any, tasks_root: str | None, eval_cfg: EvalConfig, tune_cfg: TuneConfig,
         known: DeviceInfo | None, warm: Sequence[str] = ()) -> None:
    """The child's loop: answer requests until the pipe closes. A lost context ends the process
    after the reply, so the parent starts a fresh one."""
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:  # before any stream exists, so failure is quiet
            raise RuntimeError("no CUDA device visible")
        child = Child(tasks_root, eval_cfg, tune_cfg, known, warm)
    except Exception as e:  # no device, no driver: the parent reports it in one line
        from fsr.no_device import explain

        conn.send(("fatal", explain(e)))
        return
    conn.send(("ready", child.device))
    child.note = lambda text: conn.send(("note", text))
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):  # the parent closed: finish what tuning left for the journal
            tune_module = sys.modules.get("fsr.tune")
            if tune_module is not None:
                tune_module.flush_journals(timeout_s=30.0)
            return
        try:
            reply = child.prepare(*payload) if kind == "prepare" else child.evaluate(payload)
            conn.send(("ok", reply))
        except ContextLost as e:
            log.error("GPU child: %s", e, exc_info=True)
            conn.send(("crash", str(e)))
            os._exit(3)
        except Exception as e:  # one line to the verdict; the traceback to the worker's log
            log.error("GPU child: %s failed", kind, exc_info=True)
            conn.send(("crash", crash_line(e) if is_context_error(e) else
                       f"evaluator error ({type(e).__name__}: {' '.join(str(e).split())[:300]}); "
                       "the GPU child was replaced (traceback in the worker's log)"))
            os._exit(4)
