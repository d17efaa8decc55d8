"""RayExecutor: one GPU worker actor per GPU, kept busy, replaced when it dies or hangs.

Scheduling: at most `max_in_flight_per_worker` (default 2; `from_config` uses
eval.calls_per_worker, 8) calls are outstanding per actor, and the actor runs them at once (its
evaluator compiles the next while one is on the GPU). Each task of a campaign has a home worker
(`from_config` shares them out round robin, and each worker's GPU child builds its share first);
cluster/placement.py says where a candidate goes. Candidates that cannot be placed yet wait in a
driver-side queue (`free_slots` subtracts them, so the queue stays bounded by the capacity).

Device-model pinning: timings of different GPU models are never compared. The first model a
task is dispatched to pins it; later candidates of that task only go to workers of that model,
and if none is left the executor raises NoWorkerError instead of silently mixing models.

Faults (cluster/faults.py says which are whose; cluster/supervise.py keeps the workers alive):
- a call that fails at `ray.get` (the actor's process died, its node went away, it cannot be
  reached, its result was lost, the evaluator raised): the infrastructure's fault, never the
  candidate's. Results that came back before it stand; every unanswered call of that actor goes
  back to the front of the queue and is evaluated by another worker; the actor is killed and
  replaced (immediately the first time, then with exponential backoff; a slot that fails
  `max_consecutive_failures` times in a row is retired). The user gets one line: which worker,
  what happened, how many evaluations were re-queued. A candidate that was running on
  `poison_after` consecutive losses gets CRASH (see cluster.faults).
- a call unanswered past `call_timeout_s`, counted from when it reached the head of its
  actor's queue (as observed by the driver, so the estimate errs on the late side): the worker
  is wedged, so it is killed and replaced and its calls are re-queued like the above (a
  candidate left unanswered `poison_after` times gets TIMEOUT). This is a backstop behind the
  evaluator's own watchdog, whose TIMEOUT is the kernel's verdict; `call_timeout_s` must exceed
  the evaluator's timeout.
- a worker lost while it times comparators after the campaign (`compare`): the tasks it held are
  left without figures, with why, in one notice; nothing is re-queued (no evaluation was asked).
- no worker ready for `start_timeout_s` (all lost with their nodes, none can be placed) or every
  slot retired: NoWorkerError, one line; the lineage keeps what was evaluated, and the campaign
  can be resumed.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import ray
from ray.exceptions import RayError

from cluster.faults import POISON_AFTER, first_line
from cluster.placement import place, share_tasks
from cluster.slot import Call, Slot
from cluster.supervise import Supervisor, kill_actor
from cluster.worker import EvaluatorFactory, gpu_evaluator_factory
from fsr.evaluate import PREPARE_TIMEOUT_S, START_TIMEOUT_S
from fsr.execute import base
from fsr.execute.base import Workers
from fsr.execute.local import EvaluatorUnavailable
from fsr.types import Candidate, Comparison, Evaluation, WorkerSpec

WAKEUP_S = 1.0  # poll re-checks deadlines, restarts and pins at least this often
START_TIMEOUT_S_DEFAULT = 300.0  # no worker ready this long: the campaign stops (resumable)


class NoWorkerError(EvaluatorUnavailable):
    """No live worker can take a candidate: all failed or were lost, or none has the task's GPU
    model. The message is one line."""


def call_timeout_for(spec: WorkerSpec) -> float:
    """Executor-side deadline for one evaluate call of the GPU evaluator: past the longest call
    the evaluator can legitimately make, which restarts a crashed child, prepares the task's
    inputs and times its baseline before the candidate's own verify + tune + time. The
    evaluator's watchdog fires long before this; the deadline catches a wedged worker."""
    own_s = spec.eval.timeout_s + spec.tune.time_budget_s
    compile_s = 2 * spec.eval.compile_timeout_s  # waiting for a compile process, then its compile
    return START_TIMEOUT_S + PREPARE_TIMEOUT_S + spec.eval.timeout_s + own_s + compile_s + 60.0


class RayExecutor(Supervisor):
    """Executor over Ray GPU worker actors; requires a connected Ray (`cluster.start.connect`).

    Driven from one thread (the search loop's): nothing here is locked.
    """

    def __init__(self, evaluator_factory: EvaluatorFactory | Sequence[EvaluatorFactory], num_workers: int | None = None,
                 max_in_flight_per_worker: int = 2, call_timeout_s: float = 600.0,
                 stuck_after_s: float | None = None, max_consecutive_failures: int = 5,
                 restart_backoff_s: float = 1.0, poison_after: int = POISON_AFTER,
                 start_timeout_s: float = START_TIMEOUT_S_DEFAULT, homes: Mapping[str, int] | None = None):
        """`evaluator_factory`: one for every worker, or a sequence of one per worker (each its own
        spec: its share of the tasks built first); `homes`: task -> the index of its home worker."""
        if not ray.is_initialized():
            raise RuntimeError("Ray is not connected: call cluster.start.connect() first")
        if max_in_flight_per_worker < 1 or call_timeout_s <= 0 or poison_after < 1:
            raise ValueError("max_in_flight_per_worker and poison_after must be >= 1, call_timeout_s > 0")
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if num_workers is None:
            num_workers = gpus
        if num_workers < 1:
            raise NoWorkerError("the Ray cluster has no GPUs: nothing can evaluate candidates")
        if num_workers > gpus:
            raise NoWorkerError(f"asked for {num_workers} GPU workers but the cluster has {gpus} GPUs")
        self._start_timeout_s = start_timeout_s
        self._homes = {t: i % num_workers for t, i in (homes or {}).items()}
        self._queued_at: dict[str, float] = {}  # candidate -> when it was first queued
        self._pins: dict[str, str] = {}  # task -> device name
        self._closed_at: float | None = None
        self._none_ready_since: float | None = time.monotonic()
        factories = list(evaluator_factory) if isinstance(evaluator_factory, Sequence) else [evaluator_factory]
        super().__init__(factories, num_workers, max_in_flight_per_worker, call_timeout_s,
                         stuck_after_s if stuck_after_s is not None else call_timeout_s / 2,
                         max_consecutive_failures, restart_backoff_s, poison_after)

    @classmethod
    def from_config(cls, spec: WorkerSpec, num_workers: int | None = None, **options: Any) -> RayExecutor:
        """Workers running the real GPU evaluator on the campaign `spec` (its tasks, config,
        journal place; `spec.warm` is prepared by every worker as soon as it starts), with a call
        timeout derived from its config; a call still running after the candidate's own budget
        and a minute is logged as stuck."""
        options.setdefault("call_timeout_s", call_timeout_for(spec))
        options.setdefault("max_in_flight_per_worker", spec.eval.calls_per_worker)
        options.setdefault("stuck_after_s", spec.eval.timeout_s + spec.tune.time_budget_s + 60.0)
        if options["call_timeout_s"] <= spec.eval.timeout_s:
            raise ValueError("call_timeout_s must exceed the evaluator's own timeout (eval.timeout_s)")
        workers = max(1, num_workers if num_workers is not None else int(ray.cluster_resources().get("GPU", 0)))
        homes = share_tasks([t.name for t in spec.tasks], workers)
        factories = [gpu_evaluator_factory(replace(spec, warm=tuple(t for t in spec.warm if homes.get(t) == w)))
                     for w in range(workers)]
        return cls(factories, num_workers=num_workers, homes=homes, **options)

    # --- Executor ---------------------------------------------------------------------------

    def free_slots(self) -> int:
        """Unused call capacity of all live workers (starting ones included), less the queue."""
        if self._closed_at is not None:
            return 0
        capacity = sum(self._max - len(s.calls) for s in self._slots if not s.retired)
        return max(0, capacity - len(self._pending))

    def submit(self, candidate: Candidate) -> None:
        """Send a candidate to a worker now, or queue it until a suitable one has room."""
        self._check_open()
        self._pending.append(candidate)
        self._queued_at.setdefault(candidate.id, time.monotonic())
        try:
            self._check_workers()
        except NoWorkerError:
            self._pending.pop()
            raise
        self._dispatch(time.monotonic())

    def poll(self, timeout_s: float) -> list[Evaluation]:
        """Finished evaluations (including synthesized CRASH/TIMEOUT verdicts); waits up to
        `timeout_s` for the first one while any work is outstanding."""
        self._check_open()
        out: list[Evaluation] = []
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            now = time.monotonic()
            self._restart_due(now)
            self._dispatch(now)
            self._check_workers()
            if not self._pending and not any(s.calls for s in self._slots):
                if self._waiting:  # only starting workers: take note of those now ready, or slow
                    self._collect(ray.wait(list(self._waiting), num_returns=len(self._waiting), timeout=0)[0], out)
                    self._expire(time.monotonic(), out)
                break
            wait_s = 0.0 if out else max(0.0, min(deadline, self._next_event(now)) - now)
            if self._waiting:
                refs = list(self._waiting)
                ready, _ = ray.wait(refs, num_returns=1, timeout=wait_s)
                if ready:
                    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
                    self._collect(ready, out)
            elif wait_s > 0:
                time.sleep(wait_s)  # only restarts in backoff can unblock the queue
            self._expire(time.monotonic(), out)
            if out or time.monotonic() >= deadline:
                break
        self._dispatch(time.monotonic())  # refill workers freed by this poll right away
        return out

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        """Executor.compare: each task is asked of one ready worker of the model it is pinned to
        (one that was sent its candidates, and so holds it prepared, where there is one; else its
        home; the fewest tasks each), all workers at once. A worker lost meanwhile leaves its tasks
        with why (fsr's fault, in a notice), as does one that does not answer within the bound."""
        self._check_open()
        names = list(dict.fromkeys(tasks))
        out: dict[str, Comparison] = {}
        shares: dict[int, list[str]] = {}
        for name in names:
            slot = self._comparing_slot(name, shares)
            if slot is None:
                model = self._pins.get(name)
                out[name] = Comparison(name, left="no GPU worker ready" + (f" of its model, {model}" if model else ""))
            else:
                shares.setdefault(slot.index, []).append(name)
        refs = {self._slots[i].actor.compare.remote(share, wait_s): (self._slots[i], share) for i, share in shares.items()}
        done = set(ray.wait(list(refs), num_returns=len(refs), timeout=wait_s + base.COMPARE_GRACE_S)[0]) if refs else set()
        for ref, (slot, share) in refs.items():
            try:
                if ref not in done:
                    raise TimeoutError(f"worker {slot.name} did not answer within the {wait_s:g}-s bound")
                out.update({c.task: replace(c, worker=slot.name) for c in ray.get(ref)})
            except (RayError, TimeoutError) as e:
                why = str(e) if isinstance(e, TimeoutError) else \
                    f"fsr's own fault: worker {slot.name} failed while timing them ({first_line(e)})"
                if isinstance(e, RayError):
                    self._notice(f"worker {slot.name} failed while timing the comparators of {len(share)} tasks: "
                                 f"{first_line(e)}; they are left without them")
                out.update({n: Comparison(n, worker=slot.name, left=why) for n in share})
        return [out[n] for n in names]

    def _comparing_slot(self, task: str, shares: dict[int, list[str]]) -> Slot | None:
        """The ready worker to ask for `task`'s comparators (`compare`), or None."""
        model = self._pins.get(task)
        fits = [s for s in self._slots if s.info is not None and s.actor is not None and not s.retired
                and (model is None or s.model == model)]
        home = self._slots[self._homes[task]] if task in self._homes else None
        best = [s for s in fits if task in s.tasks] or [s for s in fits if s is home] or fits
        return min(best, key=lambda s: len(shares.get(s.index, ())), default=None)

    def close(self) -> None:
        """Close the evaluators of ready, idle workers (bounded wait), then kill every actor:
        busy ones would make close wait out their calls, starting ones may never start."""
        if self._closed_at is not None:
            return
        now = time.monotonic()
        idle = [s.actor.close.remote() for s in self._slots if s.info is not None and not s.calls]
        if idle:
            ray.wait(idle, num_returns=len(idle), timeout=10.0)
        for slot in self._slots:
            if slot.actor is not None:
                slot.busy_past_s, slot.alive_past_s = slot.busy_alive_s(now)
                kill_actor(slot.actor)
                slot.actor, slot.ready_at = None, None
        self._waiting.clear()
        self._pending.clear()
        self._queued_at.clear()
        self._closed_at = now

    # --- the workers ------------------------------------------------------------------------

    def workers(self, wait_s: float = 0.0) -> Workers:
        """The GPU of each ready worker (waiting up to `wait_s` for starting ones to report), each
        slot's counters, and every notice so far (lost, re-queued, retired, not placed; each is
        also in the cluster log)."""
        deadline = time.monotonic() + wait_s
        while True:
            # a worker that failed to start is started again after its back-off: wait for it too
            self._restart_due(time.monotonic())
            starting = [s.ready_ref for s in self._slots if s.ready_ref is not None]
            due = [s.restart_at for s in self._slots if s.restart_at is not None and not s.retired]
            left = deadline - time.monotonic()
            if not (starting or due) or left <= 0:
                break
            if not starting:
                time.sleep(min(left, max(0.0, min(due) - time.monotonic()), WAKEUP_S))
                continue
            ready, _ = ray.wait(starting, num_returns=len(starting), timeout=min(left, WAKEUP_S))
            self._collect(ready, [])
        now = self._closed_at or time.monotonic()
        return Workers({s.name: s.info.device for s in self._slots if s.info is not None},
                       tuple(slot.stats(now) for slot in self._slots), tuple(self._notices))

    def pin(self, task: str, device_name: str) -> None:
        """Pin a task to a GPU model up front (a resumed run keeps the model it started on);
        its candidates then wait for a worker of that model, or NoWorkerError if none is left."""
        self._pins[task] = device_name

    # --- scheduling -------------------------------------------------------------------------

    def _dispatch(self, now: float) -> None:
        if not self._pending:
            return
        open_slots = [s for s in self._slots if s.info is not None and len(s.calls) < self._max]
        kept: deque[Candidate] = deque()
        while self._pending and open_slots:
            candidate = self._pending.popleft()
            model = self._pins.get(candidate.task) or self._preferred_model(open_slots)
            fits = [s for s in open_slots if s.model == model]
            if not fits:
                kept.append(candidate)
                continue
            home = self._slots[self._homes[candidate.task]] if candidate.task in self._homes else None
            waited_s = now - self._queued_at.get(candidate.id, now)
            slot = place(candidate.task, fits, home, self._first_ready_at, now, waited_s)
            if slot is None:
                kept.append(candidate)
                continue
            self._pins.setdefault(candidate.task, model)
            self._send(slot, candidate, now)
            if len(slot.calls) >= self._max:
                open_slots.remove(slot)
        kept.extend(self._pending)
        self._pending = kept

    def _preferred_model(self, open_slots: list[Slot]) -> str:
        """For a task not yet pinned: the model with the most live workers among those free."""
        live = [s.model for s in self._slots if not s.retired and s.model]
        return max({s.model for s in open_slots}, key=live.count)

    def _send(self, slot: Slot, candidate: Candidate, now: float) -> None:
        ref = slot.actor.evaluate.remote(candidate)
        call = Call(candidate, ref, started_at=None if slot.calls else now)
        slot.calls.append(call)
        self._waiting[ref] = (slot, call)
        slot.tasks.add(candidate.task)
        self._queued_at.pop(candidate.id, None)

    def _check_workers(self) -> None:
        """Fail loudly when queued work can never run."""
        live = [s for s in self._slots if not s.retired]
        if not live:
            errors = "; ".join(sorted({s.last_error for s in self._slots if s.last_error}))
            raise NoWorkerError(f"all {len(self._slots)} GPU workers failed repeatedly ({errors})")
        now = time.monotonic()
        if any(s.info is not None for s in live):
            self._none_ready_since = None
        elif self._none_ready_since is None:
            self._none_ready_since = now
        elif now - self._none_ready_since > self._start_timeout_s:
            states = "; ".join(f"{s.name}: {s.last_error or 'not placed (no free GPU)'}" for s in live)
            raise NoWorkerError(f"no GPU worker left: none has been ready for "
                                f"{now - self._none_ready_since:.0f} s ({states})")
        if any(not s.model for s in live):
            return  # a worker whose model is not known yet might still fit
        models = {s.model for s in live}
        for candidate in self._pending:
            model = self._pins.get(candidate.task)
            if model is not None and model not in models:
                raise NoWorkerError(
                    f"task {candidate.task!r} is pinned to GPU model {model!r} (its timings so far "
                    f"were measured there), but no live worker has it; workers have "
                    f"{sorted(models)}. Timings are never compared across GPU models: run this "
                    f"task on a cluster with {model!r} or start a new run.")

    def _check_open(self) -> None:
        if self._closed_at is not None:
            raise RuntimeError("RayExecutor is closed")

    def _next_event(self, now: float) -> float:
        """The earliest call deadline, stuck warning or restart: poll must wake up by then."""
        t = now + WAKEUP_S
        for slot in self._slots:
            if slot.restart_at is not None:
                t = min(t, slot.restart_at)
            if slot.calls and (start := slot.calls[0].started_at) is not None:
                t = min(t, start + self._call_timeout_s + 0.01)
                if not slot.calls[0].warned:
                    t = min(t, start + self._stuck_after_s + 0.01)
        return t

    # --- results and faults -----------------------------------------------------------------

    def _collect(self, ready: list[Any], out: list[Evaluation]) -> None:
        now = time.monotonic()
        for ref in ready:
            owner = self._waiting.pop(ref, None)
            if owner is None:
                continue  # already settled while handling its actor's loss
            slot, call = owner
            if call is None:
                self._on_ready(slot, ref, now)
                continue
            try:
                evaluation, busy_s = self._fetch(call)
            except RayError as e:
                self._waiting[ref] = owner  # _lose_worker settles all of this actor's calls
                self._lose_worker(slot, e, out)
                continue
            self._strikes.forget(call.candidate.id)
            slot.busy_reported_s, slot.failures = busy_s, 0
            slot.evaluations += 1
            slot.setup_s += evaluation.setup_s
            slot.calls.remove(call)
            if slot.calls and slot.calls[0].started_at is None:
                slot.calls[0].started_at = now
            out.append(replace(evaluation, worker=slot.name))

