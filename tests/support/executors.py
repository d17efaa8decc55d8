"""Collecting an executor's evaluations in a test."""

from __future__ import annotations

import time

from fsr.execute.base import Executor
from fsr.types import Evaluation


def drain(ex: Executor, count: int, timeout_s: float = 10.0) -> list[Evaluation]:
    """Poll until `count` evaluations came back or `timeout_s` passed; what came back."""
    out: list[Evaluation] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        out += ex.poll(0.5)
    return out
