"""The Evaluator and Executor protocols.

An Evaluator judges one candidate on one GPU. An Executor keeps evaluators busy: the search
loop submits candidates while slots are free and polls for finished evaluations, so GPUs never
wait on each other (no generation barrier).
"""

from __future__ import annotations

from typing import Protocol

from fsr.types import Candidate, DeviceInfo, Evaluation


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
