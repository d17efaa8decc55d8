"""Fake GPU workers on the real clock, shaped like the real ones for pacing measurements: each
worker holds up to `calls_per_worker` candidates and evaluates them one after another (a GPU
runs one at a time; the others wait in its queue), each in `eval_s` seconds, and its first
evaluation cannot start before its start-up (`startup_s`: the GPU child, the ceilings, the
task's preparation) is over. Busy is what a GPU worker reports: seconds evaluating over seconds
since it was ready. The evaluations' spans are kept, to measure busy over any window.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from fsr.execute.base import Workers, WorkerStats
from fsr.testing.fakes import FakeEvaluator
from fsr.types import Candidate, Comparison, Evaluation


@dataclass
class Worker:
    """One fake GPU: its queue (candidate, start, end), evaluated back to back."""

    name: str
    ready_at: float
    calls: deque[tuple[Candidate, float, float]] = field(default_factory=deque)
    done: list[tuple[Candidate, float, float]] = field(default_factory=list)  # finished, with start and end

    def free_at(self) -> float:
        return self.calls[-1][2] if self.calls else self.ready_at


class FakeGpuWorkers:
    """An Executor over `workers` fake GPUs (see the module docstring)."""

    def __init__(self, workers: int = 1, eval_s: float = 0.58, calls_per_worker: int = 2, startup_s: float = 3.0,
                 evaluator: FakeEvaluator | None = None) -> None:
        self.evaluator = evaluator or FakeEvaluator(fixed_us=100.0)
        self.eval_s, self.calls_per_worker = eval_s, calls_per_worker
        self.started = time.monotonic()
        self.gpus = [Worker(f"fake{i}", self.started + startup_s) for i in range(workers)]

    def free_slots(self) -> int:
        return sum(self.calls_per_worker - len(w.calls) for w in self.gpus)

    def submit(self, candidate: Candidate) -> None:
        worker = min(self.gpus, key=lambda w: (len(w.calls), w.free_at()))
        if len(worker.calls) >= self.calls_per_worker:
            raise RuntimeError("no free slot")
        start = max(time.monotonic(), worker.free_at())
        worker.calls.append((candidate, start, start + self.eval_s))

    def poll(self, timeout_s: float) -> list[Evaluation]:
        ends = [w.calls[0][2] for w in self.gpus if w.calls]
        time.sleep(max(0.0, min([timeout_s] + [e - time.monotonic() for e in ends])))
        now, out = time.monotonic(), []
        for w in self.gpus:
            while w.calls and w.calls[0][2] <= now:
                w.done.append(w.calls.popleft())
                out.append(self.evaluator.evaluate(w.done[-1][0]))
        return out

    def busy(self, since: float, until: float) -> float:
        """The workers' share of [since, until] spent evaluating."""
        covered = sum(max(0.0, min(e, until) - max(s, since)) for _, s, e in self.spans())
        return covered / (len(self.gpus) * (until - since)) if until > since else 0.0

    def spans(self) -> list[tuple[Candidate, float, float]]:
        """Every evaluation, finished or not: (candidate, start, end), in order of start."""
        return sorted((c for w in self.gpus for c in [*w.done, *w.calls]), key=lambda c: c[1])

    def first_proposed(self) -> float | None:
        """When the first candidate that is not a seed began (a proposer's first answer)."""
        return next((s for c, s, _ in self.spans() if c.origin.proposer != "seed"), None)

    def ready_at(self) -> float:
        return min(w.ready_at for w in self.gpus)

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        return self.evaluator.compare(tasks, wait_s)

    def close(self) -> None:
        pass

    def pin(self, task: str, device_name: str) -> None:
        pass

    def workers(self, wait_s: float = 0.0) -> Workers:
        """Every fake GPU with the evaluator's device; each busy over the seconds since it was
        ready (what a GPU worker reports)."""
        device, now = self.evaluator.device(), time.monotonic()
        stats = []
        for w in self.gpus:
            busy = sum(max(0.0, min(e, now) - max(s, w.ready_at)) for _, s, e in [*w.done, *w.calls])
            stats.append(WorkerStats(w.name, "ready", device.name, len(w.calls), len(w.done), 0, 0, 0, busy,
                                     max(0.0, now - w.ready_at)))
        return Workers({w.name: device for w in self.gpus}, tuple(stats))
