"""Bookkeeping of the Ray executor, one `Slot` per GPU: its current actor, its calls in flight,
its counters and busy time, kept across the actors that fill it over a run. No Ray calls here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from fsr.execute.base import WorkerStats
from fsr.types import Candidate, WorkerInfo


@dataclass
class Call:
    """One evaluate call in flight on an actor."""

    candidate: Candidate
    ref: Any  # ray.ObjectRef
    started_at: float | None = None  # when it reached the head of its actor's queue
    warned: bool = False


@dataclass
class Slot:
    """One GPU's worker across restarts."""

    index: int
    actor: Any = None
    ready_ref: Any = None  # the pending info() call of a starting actor
    info: WorkerInfo | None = None
    model: str = ""  # device name last seen here; kept across restarts for pin checks
    calls: deque[Call] = field(default_factory=deque)
    created_at: float = 0.0
    ready_at: float | None = None
    busy_reported_s: float = 0.0  # the current actor's own account of its busy time
    busy_past_s: float = 0.0  # earlier actors of this slot
    alive_past_s: float = 0.0
    failures: int = 0  # consecutive; a returned evaluation resets it
    restart_at: float | None = None
    retired: bool = False
    slow_start_warned: bool = False
    evaluations: int = 0
    setup_s: float = 0.0  # the evaluations' seconds waiting on setup (child start, task preparation)
    crashes: int = 0
    timeouts: int = 0
    restarts: int = 0
    lost: int = 0
    requeued: int = 0
    last_error: str = ""
    tasks: set[str] = field(default_factory=set)  # tasks the current actor was sent (has prepared)

    @property
    def name(self) -> str:
        if self.info is None:
            return f"w{self.index:02d}"
        return f"w{self.index:02d}@{self.info.node_ip}/gpu{','.join(self.info.gpu_ids) or '?'}"

    @property
    def state(self) -> str:
        if self.retired:
            return "retired"
        if self.actor is None:
            return "restarting"
        return "ready" if self.info is not None else "starting"

    def stats(self, now: float) -> WorkerStats:
        busy, alive = self.busy_alive_s(now)
        return WorkerStats(self.name, self.state, self.model, len(self.calls), self.evaluations,
                           self.crashes, self.timeouts, self.restarts, busy, alive, self.lost, self.requeued,
                           min(self.setup_s, busy))

    def busy_alive_s(self, now: float) -> tuple[float, float]:
        """Seconds evaluating and seconds alive, over all of this slot's actors: the current
        actor's own account plus the call in progress (since it reached the head)."""
        busy, alive = self.busy_past_s, self.alive_past_s
        if self.ready_at is not None and self.actor is not None:
            head = self.calls[0].started_at if self.calls else None
            current = self.busy_reported_s + (now - head if head is not None else 0.0)
            busy += min(current, now - self.ready_at)
            alive += now - self.ready_at
        return busy, alive
