"""Certification in the GPU child: a screened candidate judged again where nothing it could
predict from the repository holds (docs/judge.md, "Two tiers").

Screening draws its test inputs and benchmark sets from `eval.seed` and the task's content hash, so
every worker holds the same sets and a kernel could carry answers for them. Certification draws
from the operating system's entropy instead: a fresh input pool for every test size (its own
thread makes the next ones ahead) and a fresh benchmark set with its float64 references, built on
a host thread from the moment the task is prepared (with certify "end", once the host has built
the screening contents asked of it: Child.start_fresh) and again after each use, so a
certification rarely waits on a reference. The candidate's program is loaded again (nothing carried from its
screening's load, gpu.strict: its `__constant__` banks restored before every launch sequence as
its module-scope variables are), checked at every test size, then timed at the benchmark size
with the full protocol, every timed run checked (decoys included), each sample after a flush that
lines kept by eviction-priority hints do not survive (gpu.evict); then, as the timing check's pair,
the same load is timed alike on the screening's own benchmark sets (`control_us`: a fresh median
past the screened one is excused where it is as slow there, fsr.certification.slower). Every input set is drawn from a
seed of its own, and the seeds of the sets a certification took travel back with its answer to the
lineage (`certify_seeds`), so a failed certification's inputs can be drawn again
(fsr.certification.set_inputs); nothing in the repository or run.json predicts them.

Runs in the evaluator's child process only (imports cupy).
"""

from __future__ import annotations

import secrets
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import cupy as cp
import numpy as np

from fsr import certification, tasks
from fsr.evaluate import guards
from fsr.evaluate.gpu.buffers import SLACK, make_buffers, without_slack
from fsr.evaluate.gpu.inputs import (
    BenchSet,
    Content,
    InputPool,
    TaskState,
    make_content,
    no_scratch,
    stress_content,
)
from fsr.evaluate.gpu.programs import LaunchRefused
from fsr.evaluate.gpu.strict import CertifiedProgram
from fsr.evaluate.gpu.timed_runs import DeviceExpected, fingerprints, prepare_checks
from fsr.evaluate.gpu.verify import check_size
from fsr.evaluate.wire import Certified, CertifyRequest, Stages
from fsr.types import Task, Verdict

if TYPE_CHECKING:
    from fsr.evaluate.gpu.child import Child

TIMED = certification.BENCH_SET
CONTROL = certification.CONTROL_SET
CONSTANT_BANKS = "constant banks"
SLACK_CHECK = "allocation slack"
# Builds ahead, one at a time (screening's builds come first); a certification never waits in this
# queue behind other tasks' builds: one it needs that has not started moves to `_asked` (`_promoted`)
_builds = ThreadPoolExecutor(1, thread_name_prefix="fresh-bench")
_asked = ThreadPoolExecutor(2, thread_name_prefix="fresh-asked")  # builds a waiting certification asked for
_moved: weakref.WeakSet[Future[Any]] = weakref.WeakSet()  # the builds on `_asked`
T = TypeVar("T")


Drawn = tuple[int, Content]  # a content and the seed it was drawn from


def entropy_seed() -> int:
    """A seed from the operating system's entropy (never eval.seed nor a content hash); 63 bits,
    so the lineage keeps it as an int64."""
    return secrets.randbits(63)


class Fresh:
    """A task's certification inputs: a pool of fresh test inputs and one benchmark content at a
    time, built ahead on a host thread, each drawn from an entropy seed kept with it."""

    def __init__(self, task: Task, build: Callable[[Task, int], Content] | None = None):
        self.task = task
        self.pool = InputPool(task, 0, depth=1, seeds=entropy_seed)
        self._build = build or bench_content
        self._lock = threading.Lock()
        self._next: Future[Drawn] = _builds.submit(self._drawn)
        self._stress: Future[list[Drawn]] | None = _builds.submit(stress_drawn, task) if task.stress else None

    def _drawn(self) -> Drawn:
        seed = entropy_seed()
        return seed, self._build(self.task, seed)

    def bench(self) -> Drawn:
        """A benchmark content no kernel has seen and its seed (waiting for its build; one still
        queued behind other tasks' builds is started at once, `_promoted`), the next one started
        meanwhile. Raises what building it raised."""
        with self._lock:
            ready, self._next = _promoted(self._next, self._drawn), _builds.submit(self._drawn)
        return ready.result()

    def stress(self) -> list[Drawn]:
        """Fresh contents of the task's stress sets with their seeds (none declared: none), the
        next ones started; a build still queued is started at once, as `bench`'s."""
        if self._stress is None:
            return []
        with self._lock:
            ready, self._stress = _promoted(self._stress, stress_drawn, self.task), _builds.submit(stress_drawn, self.task)
        return ready.result()

    def ready(self) -> bool:
        """Whether `bench` and `stress` would answer without waiting for a build. Asked while a
        certification waits (between other candidates' turns on the GPU): a build of this task
        still queued behind other tasks' is started now on the builders for what is asked."""
        with self._lock:
            self._next = _promoted(self._next, self._drawn)
            if self._stress is not None:
                self._stress = _promoted(self._stress, stress_drawn, self.task)
            return self._next.done() and (self._stress is None or self._stress.done())

    def close(self) -> None:
        """Stop the pool's thread and drop a build not yet started."""
        self.pool.stop()
        self._next.cancel()
        if self._stress is not None:
            self._stress.cancel()


def _promoted(build: Future[T], fn: Callable[..., T], *args: object) -> Future[T]:
    """`build` where it runs or ran; one still queued on `_builds`, cancelled there and started on
    `_asked` (the same build: nothing drawn yet)."""
    if build in _moved or not build.cancel():  # moved already (it may queue there): left where it is
        return build
    moved = _asked.submit(fn, *args)
    _moved.add(moved)
    return moved


def bench_content(task: Task, seed: int) -> Content:
    """Inputs at the benchmark size drawn from `seed`, and their float64 references."""
    dtypes = {a.name: a.dtype for a in task.outputs}
    return make_content(task, tasks.functions(task), dtypes, dict(task.bench_size), np.random.default_rng(seed))


def stress_drawn(task: Task) -> list[Drawn]:
    """A content of each of the task's stress sets, each from an entropy seed of its own."""
    seeds = [entropy_seed() for _ in task.stress]
    return [(seed, stress_content(task, stress, np.random.default_rng(seed)))
            for seed, stress in zip(seeds, task.stress, strict=True)]


def upload(task: Task, content: Content, stream: cp.cuda.Stream) -> BenchSet:
    """A benchmark content on the device, as a prepared task's sets are (fsr.evaluate.gpu.child)."""
    inputs, expected = content
    bench_set = BenchSet(make_buffers(task, no_scratch(task), dict(task.bench_size), inputs), 0,
                         {k: DeviceExpected.upload(v, stream) for k, v in expected.items()})
    cp.cuda.Device().synchronize()  # the uploads ran on the default stream; fsr's does not wait for it
    for output, g in bench_set.buffers.outputs.items():
        prepare_checks(g.dtype.name, bench_set.expected[output].value.dtype.name)
    bench_set.fingerprints = fingerprints(bench_set.buffers.inputs, stream)
    return bench_set


def certify(child: Child, state: TaskState, req: CertifyRequest) -> Certified:
    """`req`'s program loaded afresh, checked at every test size on fresh inputs, then timed with
    the full protocol on a fresh benchmark set, every timed run checked. Raises ContextLost (the
    parent reports a crash as the failed check). The answer names the seed of every input set
    it took (Certified.seeds)."""
    seeds: list[tuple[str, int]] = []
    with without_slack():  # every buffer in whole pages, its end canary to the allocation's end
        return replace(_certify(child, state, req, seeds), seeds=tuple(seeds))


def _certify(child: Child, state: TaskState, req: CertifyRequest, seeds: list[tuple[str, int]]) -> Certified:
    task, cand, clock = state.task, req.candidate, _Clock()
    fresh = fresh_inputs(state)
    program = CertifiedProgram(req.cubin, req.lowered)
    refused = guards.check_module(program.globals, tuple(program.unresettable))
    if refused:
        return Certified(Verdict.REJECTED, refused, "module-scope variables", stages=clock.stages())
    if program.unrestorable:
        return Certified(Verdict.REJECTED, f"__constant__ bank {', '.join(program.unrestorable)} has no variable "
                         "the driver places by name: certification restores every constant bank before each "
                         "launch sequence and cannot restore this one", CONSTANT_BANKS, stages=clock.stages())
    try:
        checks = []
        for i, size in enumerate(task.test_sizes):
            seed, (inputs, reference) = fresh.pool.take_seeded(i)
            if seed is not None:  # always, from Fresh's pool
                seeds.append((certification.test_set(size), seed))
            checks.append(check_size(program, cand, task, size, inputs, reference, child.stream))
            if not checks[-1].passed:
                return Certified(Verdict.WRONG, checks[-1].detail,
                                 _named(certification.test_set(size), checks[-1].detail),
                                 tuple(checks), stages=clock.stages())
        for stress, (seed, (inputs, reference)) in zip(task.stress, fresh.stress(), strict=True):
            seeds.append((certification.stress_set(stress), seed))
            checks.append(check_size(program, cand, task, stress.size, inputs, reference, child.stream))
            if not checks[-1].passed:
                return Certified(Verdict.WRONG, checks[-1].detail, certification.stress_set(stress),
                                 tuple(checks), stages=clock.stages())
        clock.lap("verify")
        seed, content = fresh.bench()
        seeds.append((TIMED, seed))
        sets = TaskState(task, fresh.pool, sets=[upload(task, content, child.stream)])
        # the full protocol, as a screened winner is timed (warm-up included: the program is new),
        # with a flush that lines kept by eviction-priority hints do not survive
        samples, timed, _ = child._time(sets, cand, program, child.cfg.bench_budget_s, child.cfg.bench_min_samples,
                                        evict_hints=True)
        control: list[float] = []
        controlled = timed
        if timed.passed:  # the timing check's pair: this load on the screening's own sets, flushed alike
            control, controlled, _ = child._time(state, cand, program, child.cfg.bench_budget_s,
                                                 child.cfg.bench_min_samples, evict_hints=True)
        clock.lap("bench")
    except LaunchRefused as e:
        return Certified(Verdict.LAUNCH_ERROR, str(e), "launch", stages=clock.stages())
    if not timed.passed:
        return Certified(Verdict.WRONG, timed.detail, _named(TIMED, timed.detail), tuple(checks) + (timed,), tuple(samples),
                         stages=clock.stages())
    if not controlled.passed:
        return Certified(Verdict.WRONG, controlled.detail, _named(CONTROL, controlled.detail),
                         tuple(checks) + (timed, controlled), tuple(samples), stages=clock.stages())
    return Certified(Verdict.OK, "", "", tuple(checks) + (timed,), tuple(samples), program.resources(),
                     clock.stages(), control_us=tuple(control))


def _named(check: str, detail: str) -> str:
    """The failed check: `check`, or the allocation slack found written there."""
    return f"{SLACK_CHECK} ({check})" if SLACK in detail else check


def fresh_inputs(state: TaskState) -> Fresh:
    """The task's certification inputs, started now if its preparation did not start them."""
    if state.fresh is None:
        state.fresh = Fresh(state.task)
    return state.fresh


class _Clock:
    """Wall time of certification's stages."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.spent = {"verify": 0.0, "bench": 0.0}

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.spent[stage] += now - self.last
        self.last = now

    def stages(self) -> Stages:
        return Stages(verify_s=self.spent["verify"], bench_s=self.spent["bench"])
