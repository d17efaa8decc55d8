"""The Evaluator and Executor protocols, and the per-worker record an executor reports.

An Evaluator judges one candidate on one GPU. An Executor keeps evaluators busy: the search
loop submits candidates while slots are free and polls for finished evaluations, so GPUs never
wait on each other (no generation barrier). Everything the loop and `fsr run` ask of an executor
is on the protocol, so every executor answers it (a hook that only one executor offered, looked
up by name, was silently skipped by the others). DEVICE_WAIT_S is how long a caller that needs a
worker's GPU (a model's prompt, the check that a GPU is there at all) waits for one to start.
COMPARE_GRACE_S is how long past its bound an executor waits for a worker's answer to `compare`
(the worker keeps the bound itself; this catches one that does not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fsr.types import Candidate, Comparison, DeviceInfo, Evaluation

DEVICE_WAIT_S = 60.0
COMPARE_GRACE_S = 10.0
BOUND_RAN_OUT = "still being timed when the wait's bound ran out"  # a Comparison's `left`


@dataclass(frozen=True)
class WorkerStats:
    """One worker (a GPU), accumulated over the processes or actors that have filled it."""

    name: str
    state: str  # starting | ready | restarting | retired | stopped
    device: str
    in_flight: int
    evaluations: int
    crashes: int  # CRASH and TIMEOUT verdicts given by the executor (candidates that took down
    timeouts: int  # poison_after workers in a row); the GPU child's verdicts are evaluations
    restarts: int
    busy_s: float
    alive_s: float
    lost: int = 0  # actors lost (process died, node gone, unreachable, hung, evaluator raised)
    requeued: int = 0  # unanswered calls of lost actors, sent to the queue again
    setup_s: float = 0.0  # of busy_s, waiting on setup: starting the GPU child, preparing tasks

    def shares(self) -> tuple[float, float, float]:
        """(evaluating, preparing, idle) fractions of the seconds alive: busy_s less setup_s is
        evaluating, setup_s preparing, the rest idle."""
        if self.alive_s <= 0:
            return 0.0, 0.0, 0.0
        busy, setup = min(self.busy_s, self.alive_s), min(self.setup_s, self.busy_s)
        return (busy - setup) / self.alive_s, setup / self.alive_s, 1.0 - busy / self.alive_s


class Evaluator(Protocol):
    def evaluate(self, candidate: Candidate) -> Evaluation:
        """Judge one candidate; never raises for a bad kernel (failures are verdicts)."""
        ...

    def device(self) -> DeviceInfo:
        """The GPU this evaluator times on, with its measured ceilings."""
        ...

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        """One Comparison per task of `tasks`, in order: its comparators' figures, timed now where
        this evaluator has none yet (waiting up to `wait_s` in all for those still being timed),
        else from its record of them (never timed twice). Not an evaluation; never raises for a
        comparator that fails (a figure left out, with why)."""
        ...

    def close(self) -> None:
        """Release the GPU and any child process."""
        ...


@dataclass(frozen=True)
class Workers:
    """An executor's GPU workers at one instant: the device of each ready worker by name, each
    worker's counters, and every one-line notice so far (a worker lost, evaluations re-queued),
    oldest first: a reader shows the ones it has not shown yet."""

    devices: Mapping[str, DeviceInfo] = field(default_factory=dict)
    stats: tuple[WorkerStats, ...] = ()
    notices: tuple[str, ...] = ()

    @property
    def device(self) -> DeviceInfo | None:
        """A ready worker's GPU (what a model's prompt describes), None before any is ready."""
        return next(iter(self.devices.values()), None)

    @property
    def busy_fraction(self) -> float:
        """Worker-seconds spent evaluating candidates (not starting or preparing) over
        worker-seconds ready, in [0, 1]."""
        alive = sum(w.alive_s for w in self.stats)
        return sum(w.shares()[0] * w.alive_s for w in self.stats) / alive if alive > 0 else 0.0


class Executor(Protocol):
    """Runs candidates on GPU workers: the search loop submits while slots are free and polls for
    finished evaluations, each stamped with the worker that gave it; `workers` tells the loop,
    the view and the run summary about the workers."""

    def free_slots(self) -> int:
        """How many more candidates may be submitted now without queueing."""
        ...

    def submit(self, candidate: Candidate) -> None:
        """Start evaluating a candidate; its Evaluation comes back from `poll`."""
        ...

    def poll(self, timeout_s: float) -> list[Evaluation]:
        """Evaluations finished since the last call, `worker` set; waits up to `timeout_s` for at
        least one."""
        ...

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        """The comparators of `tasks` from the workers (Evaluator.compare; on a GPU of the model
        a task is pinned to), one Comparison per task, stamped with the worker: asked once no
        evaluation is in flight, after a campaign's last, and answered within about `wait_s`
        (COMPARE_GRACE_S past it at most). A worker that cannot answer (lost, unavailable, too
        slow) leaves its tasks with `left` saying why; it never raises for that."""
        ...

    def pin(self, task: str, device_name: str) -> None:
        """Evaluate `task` only on GPUs of model `device_name` (a resumed run keeps the model it
        started on: timings of different models are never compared). A task pinned to a model
        no worker has is refused with EvaluatorUnavailable when it is submitted."""
        ...

    def workers(self, wait_s: float = 0.0) -> Workers:
        """The workers now, having waited up to `wait_s` for starting ones to report their GPU
        (an executor whose one worker cannot start raises EvaluatorUnavailable)."""
        ...

    def close(self) -> None:
        """Stop all workers."""
        ...
