"""The Evaluator and Executor protocols, and the per-worker record an executor reports.

An Evaluator judges one candidate on one GPU. An Executor keeps evaluators busy: the search
loop submits candidates while slots are free and polls for finished evaluations, so GPUs never
wait on each other (no generation barrier). Everything the loop and `fsr run` ask of an executor
is on the protocol, so every executor answers it (a hook that only one executor offered, looked
up by name, was silently skipped by the others).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from fsr.types import Candidate, DeviceInfo, Evaluation


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

    def close(self) -> None:
        """Release the GPU and any child process."""
        ...


class Executor(Protocol):
    """Runs candidates on GPU workers. The first four methods are the work; the rest tell the
    loop and the command about the workers (pinning, devices, progress, the summary)."""

    def free_slots(self) -> int:
        """How many more candidates may be submitted now without queueing."""
        ...

    def submit(self, candidate: Candidate) -> None:
        """Start evaluating a candidate; its Evaluation comes back from `poll`."""
        ...

    def poll(self, timeout_s: float) -> list[Evaluation]:
        """Evaluations finished since the last call; waits up to `timeout_s` for at least one."""
        ...

    def close(self) -> None:
        """Stop all workers."""
        ...

    def pin(self, task: str, device_name: str) -> None:
        """Evaluate `task` only on GPUs of model `device_name` (a resumed run keeps the model it
        started on: timings of different models are never compared). A task pinned to a model
        no worker has is refused with EvaluatorUnavailable when it is submitted."""
        ...

    def devices(self) -> dict[str, DeviceInfo]:
        """The GPU of each ready worker, by worker name; may wait for starting workers."""
        ...

    def worker_of(self, candidate_id: str) -> str | None:
        """The worker a candidate was last sent to (the lineage's `worker` column), if known."""
        ...

    def busy_fraction(self) -> float:
        """Worker-seconds spent evaluating candidates (not starting or preparing) over
        worker-seconds ready, in [0, 1]."""
        ...

    def worker_stats(self) -> list[WorkerStats]:
        """One record per worker, for the run summary."""
        ...

    def notices(self) -> list[str]:
        """One-line reports since the last call (a worker lost, evaluations re-queued), for the
        progress view; empty where nothing can happen to a worker that the user should hear."""
        ...
