"""Worker time: how much of a worker's time each of its overlapping evaluations adds, so that
per-worker sums stay the worker's busy time (an evaluation's `wall_s`)."""

from __future__ import annotations

import threading
import time
from collections import Counter


class WorkerTime:
    """Attributes a worker's time to evaluations that may overlap: an evaluation is charged its
    span less the parts that evaluations finished before it were charged, so the charges add up
    to the time at least one evaluation was running. The finished spans are kept as their union,
    less the parts that no running evaluation can overlap any more (many short evaluations may
    finish inside one long one: a fixed number of spans would forget some of them and charge
    their time twice)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._union: list[tuple[float, float]] = []  # disjoint, in order
        self._running: Counter[float] = Counter()  # starts handed out by `begin`, not yet charged

    def begin(self, now: float | None = None) -> float:
        """The start of an evaluation (`now`, default the clock's now); pass it to `charge` when
        the evaluation ends. Starts come in time order."""
        with self._lock:
            start = time.perf_counter() if now is None else now
            self._running[start] += 1
            return start

    def charge(self, start: float, end: float) -> float:
        """The evaluation begun at `start` ended at `end`: the time it adds to the union."""
        with self._lock:
            covered = _covered(start, end, self._union)
            self._running[start] -= 1
            if self._running[start] <= 0:
                del self._running[start]
            horizon = min(self._running, default=end)  # no evaluation begun later starts before it
            self._union = [span for span in _merged(self._union, start, end) if span[1] > horizon]
        return max(0.0, end - start - covered)


def _merged(union: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """`union` (disjoint, in order) with [start, end] added, still disjoint and in order."""
    out: list[tuple[float, float]] = []
    for s, e in union:
        if e < start or s > end:
            out.append((s, e))
        else:
            start, end = min(s, start), max(e, end)
    out.append((start, end))
    return sorted(out)


def _covered(start: float, end: float, spans: list[tuple[float, float]]) -> float:
    """Length of [start, end] inside the union of `spans`."""
    clipped = sorted((max(s, start), min(e, end)) for s, e in spans if e > start and s < end)
    total, reach = 0.0, start
    for s, e in clipped:
        if e > reach:
            total += e - max(s, reach)
            reach = e
    return total
