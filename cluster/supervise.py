"""The GPU workers' lives under the Ray executor: starting an actor, noticing it is ready, losing it
(its process died, its node left, it stopped answering), settling its calls, replacing it with a
backoff, and retiring a slot that keeps failing. cluster/faults.py says which failures are whose.

`Supervisor` is RayExecutor's base: the executor adds the queue, the placement of candidates and
the protocol the search loop calls; the slots, the calls in flight and the lost-call bookkeeping
they share are declared here.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import ray
from ray.exceptions import RayError, RayTaskError

from cluster.faults import Strikes, describe_loss, first_line
from cluster.slot import Call, Slot
from cluster.worker import EvaluatorFactory, GpuWorkerActor
from fsr.types import Candidate, Evaluation, Verdict

log = logging.getLogger("cluster.executor")  # one log for the executor and its supervision

MAX_BACKOFF_S = 60.0


def kill_actor(actor: Any) -> None:
    try:
        ray.kill(actor)
    except RayError as e:  # already gone with its node: nothing left to stop
        log.debug("ray.kill: %s", e)


class Supervisor:
    """The slots (one per GPU worker) and what keeps them filled with live actors."""

    def __init__(self, factories: Sequence[EvaluatorFactory], num_workers: int, max_in_flight: int,
                 call_timeout_s: float, stuck_after_s: float, max_consecutive_failures: int,
                 restart_backoff_s: float, poison_after: int):
        """`factories`: one evaluator factory, or one per worker (slot i uses factories[i])."""
        self._max = max_in_flight
        self._call_timeout_s = call_timeout_s
        self._stuck_after_s = stuck_after_s
        self._max_failures = max_consecutive_failures
        self._backoff_s = restart_backoff_s
        self._strikes = Strikes(poison_after)
        self._notices: list[str] = []
        self._factory_refs = [ray.put(f) for f in factories]  # shipped once, not once per actor
        self._first_ready_at: float | None = None
        self._slots = [Slot(i) for i in range(num_workers)]
        self._waiting: dict[Any, tuple[Slot, Call | None]] = {}  # ObjectRef -> owner
        self._pending: deque[Candidate] = deque()
        now = time.monotonic()
        for slot in self._slots:
            self._start_actor(slot, now)

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
                out.append(verdict := replace(self._strikes.verdict(running, slot.model), worker=slot.name))
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
            out.append(replace(evaluation, worker=slot.name))
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
            kill_actor(slot.actor)  # a hung actor must go; for a dead one this is a no-op
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
