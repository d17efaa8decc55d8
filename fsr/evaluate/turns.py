"""Turns on a worker's GPU child: one call at a time, a certification before the candidates waiting.

The evaluator runs several calls at once (their host work overlaps); their GPU work takes turns.
A certification decides what a task's best is, and the search queued it ahead of new candidates,
so it also goes ahead of the candidates already waiting in the worker for their turn.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Turns:
    """A re-entrant lock (a task's baseline is judged inside its first preparation) whose urgent
    waiters go before the others."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._owner: int | None = None
        self._depth = 0
        self._urgent = 0  # urgent callers waiting

    def __enter__(self) -> Turns:
        self._acquire(urgent=False)
        return self

    def __exit__(self, *exc: object) -> None:
        self._release()

    @contextmanager
    def urgent(self) -> Iterator[None]:
        """A turn ahead of every caller waiting without urgency."""
        self._acquire(urgent=True)
        try:
            yield
        finally:
            self._release()

    def _acquire(self, urgent: bool) -> None:
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return
            self._urgent += urgent
            while self._owner is not None or (not urgent and self._urgent):
                self._cond.wait()
            self._urgent -= urgent
            self._owner, self._depth = me, 1

    def _release(self) -> None:
        with self._cond:
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._cond.notify_all()
