"""Facts about the host that the evaluator sizes its threads by."""

from __future__ import annotations

import os


def cores() -> int:
    """The cores this process may run on: its CPU affinity where the platform has one (a
    container's cpuset, `taskset`, a batch scheduler's share), else every core of the host."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1
