"""Proposals in flight: inline for a fast proposer, on a small thread pool for a slow one.

A language model takes seconds per request; running its requests on `workers` threads, with at
most `workers` outstanding, lets the loop keep submitting and polling so GPUs do not wait. The
offline mutator takes well under a millisecond and runs inline (workers = 0), which also makes
a search with it deterministic. A proposer that raises is counted, never fatal.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from fsr.propose.base import ProposalRequest, Proposals, Proposer


@dataclass(frozen=True)
class Answer:
    """A request with what the proposer made of it (`error` set if it raised)."""

    request: ProposalRequest
    proposals: Proposals
    error: str = ""


class ProposalPool:
    """Runs proposal requests and hands back their answers."""

    def __init__(self, proposer: Proposer, workers: int = 0) -> None:
        self.proposer = proposer
        self.workers = max(0, workers)
        self._threads = ThreadPoolExecutor(self.workers, "fsr-propose") if self.workers else None
        self._pending: deque[tuple[ProposalRequest, Future[Proposals] | Answer]] = deque()

    @property
    def outstanding(self) -> int:
        """Requests not yet collected."""
        return len(self._pending)

    def has_room(self) -> bool:
        """Whether another request may start now (inline: always; threaded: a thread is free)."""
        return self._threads is None or self.outstanding < self.workers

    def submit(self, request: ProposalRequest) -> None:
        """Start a request (inline: run it now)."""
        if self._threads is None:
            self._pending.append((request, self._run(request)))
        else:
            self._pending.append((request, self._threads.submit(self.proposer.propose, request)))

    def collect(self) -> list[Answer]:
        """Finished answers, in request order among those finished (a slow model request does
        not hold back the ones behind it; inline answers come back exactly in request order)."""
        out: list[Answer] = []
        waiting: deque[tuple[ProposalRequest, Future[Proposals] | Answer]] = deque()
        for request, item in self._pending:
            if isinstance(item, Future):
                if not item.done():
                    waiting.append((request, item))
                    continue
                exc = item.exception()
                item = Answer(request, Proposals(()), f"{type(exc).__name__}: {exc}") if exc \
                    else Answer(request, item.result())
            out.append(item)
        self._pending = waiting
        return out

    def _run(self, request: ProposalRequest) -> Answer:
        try:
            return Answer(request, self.proposer.propose(request))
        except Exception as e:  # a proposer's own fault: counted by the loop, the search goes on
            return Answer(request, Proposals(()), f"{type(e).__name__}: {e}")

    def close(self) -> None:
        """Stop taking work; running requests finish in their threads and are discarded."""
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
