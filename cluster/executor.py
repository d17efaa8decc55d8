"""RayExecutor: one GPU worker actor per GPU, kept busy, replaced when it dies or hangs.

Scheduling: at most `max_in_flight_per_worker` (default 2; `from_config` uses
eval.calls_per_worker, 8) calls are outstanding per actor, and the actor runs them at once (its
evaluator compiles the next while one is on the GPU). A worker prepares each task it is sent
(inputs, references, comparators: seconds each), so the campaign's tasks are shared out: each
task has a home worker (`homes`, round robin over the campaign's tasks in `from_config`, whose
workers build their own share first), and its candidates go there while the home has room. A
worker with nothing to do takes another's pending candidates (re-balancing: it then holds that
task too), and so does any worker once a home has not been ready for HOME_GRACE_S after the
first worker was. A task with no home goes to the least-loaded ready worker, where a worker that
was already sent the task counts AFFINITY_CALLS calls fewer. Candidates that cannot be placed
yet wait in a driver-side queue (`free_slots` subtracts them, so the queue stays bounded by the
capacity).

Device-model pinning: timings of different GPU models are never compared. The first model a
task is dispatched to pins it; later candidates of that task only go to workers of that model,
and if none is left the executor raises NoWorkerError instead of silently mixing models.

Faults (cluster/faults.py says which are whose):
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
- no worker ready for `start_timeout_s` (all lost with their nodes, none can be placed) or every
  slot retired: NoWorkerError, one line; the lineage keeps what was evaluated, and the campaign
  can be resumed.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import ray
from ray.exceptions import RayError, RayTaskError

from cluster.faults import POISON_AFTER, Strikes, describe_loss, first_line
from cluster.slot import Call, Slot
from cluster.worker import EvaluatorFactory, GpuWorkerActor, gpu_evaluator_factory
from fsr.evaluate import PREPARE_TIMEOUT_S, START_TIMEOUT_S
from fsr.execute.base import WorkerStats
from fsr.execute.local import EvaluatorUnavailable
from fsr.types import Candidate, DeviceInfo, Evaluation, Verdict, WorkerSpec

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 60.0
AFFINITY_CALLS = 2  # a worker that has a task prepared takes its candidates unless this much busier
HOME_GRACE_S = 30.0  # a task's home not ready this long after the first worker was: others take its work
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


def share_tasks(tasks: Sequence[str], workers: int) -> dict[str, int]:
    """Each task's home worker: round robin in the campaign's order, so every worker holds about
    len(tasks) / workers of them and the campaign's first tasks start on every worker at once."""
    return {task: i % max(1, workers) for i, task in enumerate(dict.fromkeys(tasks))}


def _kill(actor: Any) -> None:
    try:
        ray.kill(actor)
    except RayError as e:  # already gone with its node: nothing left to stop
        log.debug("ray.kill: %s", e)


class RayExecutor:
    """Executor over Ray GPU worker actors; requires a connected Ray (`cluster.start.connect`).

    Driven from one thread (the search loop's): nothing here is locked.
    """

    def __init__(self, evaluator_factory: EvaluatorFactory, num_workers: int | None = None,
                 max_in_flight_per_worker: int = 2, call_timeout_s: float = 600.0,
                 stuck_after_s: float | None = None, max_consecutive_failures: int = 5,
                 restart_backoff_s: float = 1.0, poison_after: int = POISON_AFTER,
                 start_timeout_s: float = START_TIMEOUT_S_DEFAULT,
                 worker_factories: Sequence[EvaluatorFactory] | None = None, homes: Mapping[str, int] | None = None):
        """`worker_factories`: one factory per worker, in place of `evaluator_factory` (each worker's
        own spec: its share of the tasks built first); `homes`: task -> the index of its home worker."""
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
        self._max = max_in_flight_per_worker
        self._call_timeout_s = call_timeout_s
        self._stuck_after_s = stuck_after_s if stuck_after_s is not None else call_timeout_s / 2
        self._max_failures = max_consecutive_failures
        self._backoff_s = restart_backoff_s
        self._start_timeout_s = start_timeout_s
        self._strikes = Strikes(poison_after)
        self._notices: list[str] = []
        self._factory_refs = [ray.put(f) for f in worker_factories] if worker_factories else \
            [ray.put(evaluator_factory)]  # shipped once, not once per actor
        self._homes = {t: i % num_workers for t, i in (homes or {}).items()}
        self._first_ready_at: float | None = None
        self._slots = [Slot(i) for i in range(num_workers)]
        self._waiting: dict[Any, tuple[Slot, Call | None]] = {}  # ObjectRef -> owner
        self._pending: deque[Candidate] = deque()
        self._pins: dict[str, str] = {}  # task -> device name
        self._worker_of: dict[str, str] = {}
        self._closed_at: float | None = None
        now = time.monotonic()
        self._none_ready_since: float | None = now
        for slot in self._slots:
            self._start_actor(slot, now)

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
        return cls(gpu_evaluator_factory(spec), num_workers=num_workers, worker_factories=factories, homes=homes,
                   **options)

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
                _kill(slot.actor)
                slot.actor, slot.ready_at = None, None
        self._waiting.clear()
        self._pending.clear()
        self._closed_at = now

    # --- the workers ------------------------------------------------------------------------

    def busy_fraction(self) -> float:
        """Worker-seconds spent evaluating candidates (not starting or preparing) over
        worker-seconds alive since each became ready."""
        stats = self.worker_stats()
        alive = sum(w.alive_s for w in stats)
        return sum(w.shares()[0] * w.alive_s for w in stats) / alive if alive > 0 else 0.0

    def worker_stats(self) -> list[WorkerStats]:
        """Per-slot counters, for progress displays and the run summary."""
        now = self._closed_at or time.monotonic()
        return [slot.stats(now) for slot in self._slots]

    def worker_of(self, candidate_id: str) -> str | None:
        """The worker a candidate was last sent to (the lineage's `worker` column)."""
        return self._worker_of.get(candidate_id)

    def devices(self, timeout_s: float = 60.0) -> dict[str, DeviceInfo]:
        """GPU of each ready worker, waiting up to `timeout_s` for starting ones to report."""
        deadline = time.monotonic() + timeout_s
        while (starting := [s.ready_ref for s in self._slots if s.ready_ref is not None]):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _ = ray.wait(starting, num_returns=len(starting), timeout=left)
            self._collect(ready, [])
        return {s.name: s.info.device for s in self._slots if s.info is not None}

    def notices(self) -> list[str]:
        """One-line reports of what happened to workers since the last call (lost, re-queued,
        retired, not placed), for the progress view; each is also in the cluster log."""
        out, self._notices = self._notices, []
        return out

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
            slot = self._place(candidate.task, fits, now)
            if slot is None:
                kept.append(candidate)
                continue
            self._pins.setdefault(candidate.task, model)
            self._send(slot, candidate, now)
            if len(slot.calls) >= self._max:
                open_slots.remove(slot)
        kept.extend(self._pending)
        self._pending = kept

    def _place(self, task: str, fits: list[Slot], now: float) -> Slot | None:
        """The open worker for a candidate of `task` (None: it waits): its home while the home has
        room; else a worker with nothing to do, or any, once the home is gone or slow to start;
        a task without a home goes to the least loaded, counting AFFINITY_CALLS for one that has it."""
        home = self._slots[self._homes[task]] if task in self._homes else None
        if home is None or home.retired:
            return min(fits, key=lambda s: len(s.calls) - (AFFINITY_CALLS if task in s.tasks else 0))
        if home in fits:
            return home
        idle = [s for s in fits if not s.calls]
        if idle:
            return min(idle, key=lambda s: (task not in s.tasks, s.index))
        late = home.info is None and self._first_ready_at is not None and now - self._first_ready_at > HOME_GRACE_S
        return min(fits, key=lambda s: len(s.calls)) if late else None

    def _preferred_model(self, open_slots: list[Slot]) -> str:
        """For a task not yet pinned: the model with the most live workers among those free."""
        live = [s.model for s in self._slots if not s.retired and s.model]
        return max({s.model for s in open_slots}, key=live.count)

    def _send(self, slot: Slot, candidate: Candidate, now: float) -> None:
        ref = slot.actor.evaluate.remote(candidate)
        call = Call(candidate, ref, started_at=None if slot.calls else now)
        slot.calls.append(call)
        self._waiting[ref] = (slot, call)
        self._worker_of[candidate.id] = slot.name
        slot.tasks.add(candidate.task)

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
            out.append(evaluation)

    def _fetch(self, call: Call) -> tuple[Evaluation, float]:
        """The result of a finished call; raises Ray's exception when the call failed."""
        return ray.get(call.ref)  # type: ignore[no-any-return]

    @staticmethod
    def _node_gone(slot: Slot) -> bool:
        """Whether the worker's node has left the cluster (asked only after a loss; Ray notices
        a dead node after its health checks fail, so a fresh loss may still read as alive)."""
        if slot.info is None:
            return False
        try:
            nodes = ray.nodes()
        except RayError:
            return False
        return not any(n.get("NodeID") == slot.info.node_id and n.get("Alive") for n in nodes)

    def _on_ready(self, slot: Slot, ref: Any, now: float) -> None:
        slot.ready_ref = None
        try:
            slot.info = ray.get(ref)
        except RayError as e:
            reason = f"failed to start: {first_line(e)}"
            self._notice(f"worker {slot.name} {reason}")
            self._replace_actor(slot, reason)
            return
        slot.model, slot.ready_at, slot.busy_reported_s = slot.info.device.name, now, 0.0
        self._first_ready_at = self._first_ready_at or now
        log.info("worker %s ready on %s after %.1f s", slot.name, slot.model, now - slot.created_at)

    def _expire(self, now: float, out: list[Evaluation]) -> None:
        for slot in self._slots:
            if slot.ready_ref is not None and not slot.slow_start_warned \
                    and now - slot.created_at > self._stuck_after_s:
                slot.slow_start_warned = True
                self._notice(f"worker {slot.name} has not started after {now - slot.created_at:.0f} s "
                             f"(no free GPU in the cluster?)")
            if not slot.calls or (start := slot.calls[0].started_at) is None:
                continue
            head = slot.calls[0]
            elapsed = now - start
            if elapsed > self._call_timeout_s:
                if ray.wait([head.ref], timeout=0)[0]:
                    continue  # answered just now: collected on the next round
                self._lose_worker(slot, f"no answer after {elapsed:.0f} s (call timeout "
                                  f"{self._call_timeout_s:.0f} s), killed", out, unanswered=True)
            elif elapsed > self._stuck_after_s and not head.warned:
                head.warned = True
                log.warning("candidate %s has been running on %s for %.0f s", head.candidate.id,
                            slot.name, elapsed)

    def _lose_worker(self, slot: Slot, cause: BaseException | str, out: list[Evaluation],
                     unanswered: bool = False) -> None:
        """Settle every call of an actor that is dead, unreachable, hung or distrusted, then
        schedule its replacement. Results that came back before it went stand; the rest are
        queued again, except a candidate that was running on `poison_after` losses in a row."""
        gone = isinstance(cause, BaseException) and not isinstance(cause, RayTaskError) \
            and self._node_gone(slot)
        reason = cause if isinstance(cause, str) else \
            describe_loss(cause, slot.info.node_ip if slot.info else "", gone)
        slot.busy_past_s, slot.alive_past_s = slot.busy_alive_s(time.monotonic())
        slot.ready_at = None
        calls = list(slot.calls)
        slot.calls.clear()
        for c in calls:
            self._waiting.pop(c.ref, None)
        unsettled = calls[self._settle_answered(slot, calls, out):]
        requeue = [c.candidate for c in unsettled]
        blamed = ""
        if unsettled and not gone:  # the first unanswered call is the one the actor was running
            running = unsettled[0].candidate
            if self._strikes.add(running, f"{slot.name}: {reason}", unanswered):
                out.append(verdict := self._strikes.verdict(running, slot.model))
                slot.crashes += verdict.verdict == Verdict.CRASH
                slot.timeouts += verdict.verdict == Verdict.TIMEOUT
                requeue.pop(0)
                blamed = f"; candidate {running.id} was running on each of the last " \
                         f"{self._strikes.limit} losses: {verdict.verdict.value}"
        self._pending.extendleft(reversed(requeue))
        slot.lost += 1
        slot.requeued += len(requeue)
        self._notice(f"worker {slot.name} lost: {reason}; {len(requeue)} evaluation"
                     f"{'' if len(requeue) == 1 else 's'} re-queued{blamed}")
        self._replace_actor(slot, reason)

    def _settle_answered(self, slot: Slot, calls: list[Call], out: list[Evaluation]) -> int:
        """Hand out the results an actor returned before it was lost, in call order, up to its
        first unanswered call; how many."""
        if not calls:
            return 0
        done = set(ray.wait([c.ref for c in calls], num_returns=len(calls), timeout=0)[0])
        settled = 0
        for c in calls:
            if c.ref not in done:
                break
            try:
                evaluation, _ = self._fetch(c)
            except RayError:
                break
            self._strikes.forget(c.candidate.id)
            slot.evaluations += 1
            slot.setup_s += evaluation.setup_s
            out.append(evaluation)
            settled += 1
        return settled

    def _notice(self, line: str) -> None:
        log.warning("%s", line)
        self._notices.append(line)

    def _replace_actor(self, slot: Slot, reason: str) -> None:
        now = time.monotonic()
        if slot.ready_ref is not None:
            self._waiting.pop(slot.ready_ref, None)
        if slot.actor is not None:
            _kill(slot.actor)  # a hung actor must go; for a dead one this is a no-op
        slot.actor, slot.ready_ref, slot.info, slot.ready_at = None, None, None, None
        slot.failures += 1
        slot.last_error = reason
        if slot.failures > self._max_failures:
            slot.retired = True
            self._notice(f"worker w{slot.index:02d} retired after {slot.failures} failures in a row: {reason}")
            return
        delay = 0.0 if slot.failures == 1 else min(self._backoff_s * 2 ** (slot.failures - 2), MAX_BACKOFF_S)
        slot.restart_at = now + delay

    def _restart_due(self, now: float) -> None:
        for slot in self._slots:
            if slot.restart_at is not None and slot.restart_at <= now and not slot.retired:
                slot.restarts += 1
                self._start_actor(slot, now)

    def _start_actor(self, slot: Slot, now: float) -> None:
        # Resources are declared here rather than on the class so that one definition serves
        # real GPUs and the fake GPUs of a test cluster alike. num_cpus=0: the actor mostly
        # waits on its GPU child, and must not be starved of a CPU slot by other Ray work.
        factory = self._factory_refs[slot.index % len(self._factory_refs)]
        slot.actor = GpuWorkerActor.options(num_gpus=1, num_cpus=0, max_concurrency=self._max).remote(factory)
        slot.ready_ref = slot.actor.info.remote()
        slot.created_at, slot.restart_at, slot.slow_start_warned = now, None, False
        slot.tasks = set()  # a new actor has nothing prepared
        self._waiting[slot.ready_ref] = (slot, None)
