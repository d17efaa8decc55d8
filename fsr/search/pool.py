"""Proposals in flight: inline for a fast proposer, paced for a slow one.

The offline mutator takes well under a millisecond and runs inline (no pacer), which also
makes a search with it deterministic. A language model takes seconds per request: its requests
are started with `Proposer.start` (no thread each) as many at a time as the pacer
(fsr.search.pace) allows: enough that the workers never wait, no more than they can use, within
the user's ceilings. A request is built from its island's state when it starts, never queued
unbuilt-then-stale. A proposer that raises is counted, never fatal.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace

from fsr.propose.base import ProposalRequest, Proposals, Proposer, propose
from fsr.search.pace import Ceilings, Pacer, PaceStats
from fsr.types import DeviceInfo


@dataclass(frozen=True)
class Answer:
    """A request with what the proposer made of it (`error` set if it raised) and how long it
    took from start to answer."""

    request: ProposalRequest
    proposals: Proposals
    error: str = ""
    latency_s: float = 0.0


class ProposalPool:
    """Runs proposal requests and hands back their answers. `pace` None: inline, one request
    at a time; else paced within those ceilings, for `gpus` GPUs (0: unknown). `device`, where
    known, is set on every request."""

    def __init__(self, proposer: Proposer, pace: Ceilings | None = None,
                 clock: Callable[[], float] = time.monotonic, gpus: int = 0, device: DeviceInfo | None = None) -> None:
        self.proposer = proposer
        self.device = device  # stamped on every request: the GPU its candidates will be timed on
        self.pacer = Pacer(pace, gpus) if pace is not None else None
        self.clock = clock
        # Requests not yet collected, by sequence number (oldest first); the numbers of those
        # answered, appended from whichever thread completes a future (deque appends are atomic).
        self._pending: dict[int, tuple[ProposalRequest, float, Future[Proposals] | Answer]] = {}
        self._done: deque[int] = deque()
        self._seq = 0

    @property
    def outstanding(self) -> int:
        """Requests not yet collected."""
        return len(self._pending)

    def allowance(self, *, workers: int, waiting: int, free: int, n: int = 1) -> int:
        """How many requests may start now: inline, one while the free slots lack candidates
        (`n` a request); paced, what the pacer allows for `workers` workers with `waiting`
        candidates ready."""
        if self.pacer is None:
            return 1 if waiting + self.outstanding * n < free else 0
        now = self.clock()
        return self.pacer.allowance(now, workers=workers, in_flight=self.outstanding, waiting=waiting,
                                    oldest_s=self._oldest_s(now))

    def submit(self, request: ProposalRequest) -> None:
        """Start a request (inline: run it now)."""
        now, seq = self.clock(), self._seq
        self._seq += 1
        if self.device is not None:
            request = replace(request, device=self.device)
        if self.pacer is None:
            self._pending[seq] = (request, now, self._run(request))
            self._done.append(seq)
            return
        self.pacer.sent(now)
        try:
            future = self.proposer.start(request)
        except Exception as e:  # a proposer's own fault: counted by the loop, the search goes on
            future = Future()
            future.set_exception(e)
        self._pending[seq] = (request, now, future)
        future.add_done_callback(functools.partial(self._finished, seq))

    def collect(self) -> list[Answer]:
        """Finished answers, in request order among those finished (a slow model request does
        not hold back the ones behind it; inline answers come back exactly in request order)."""
        done = []
        while self._done:
            done.append(self._done.popleft())
        out: list[Answer] = []
        now = self.clock()
        for seq in sorted(done):
            request, sent, item = self._pending.pop(seq)
            if isinstance(item, Future):
                exc = item.exception() if not item.cancelled() else RuntimeError("cancelled")
                item = Answer(request, Proposals(()), f"{type(exc).__name__}: {exc}", now - sent) if exc \
                    else Answer(request, item.result(), latency_s=now - sent)
                if self.pacer is not None:
                    for retry_after in item.proposals.throttles:
                        self.pacer.throttled(now, retry_after, self.outstanding)
            out.append(item)
        return out

    def answered(self, answer: Answer, new_candidates: int) -> None:
        """The loop tells how many new candidates an answer brought (after dropping repeats)."""
        if self.pacer is not None:
            p = answer.proposals
            tokens = (p.prompt_tokens or 0) + (p.completion_tokens or 0)
            self.pacer.answered(self.clock(), answer.latency_s, new_candidates, tokens or None)

    def evaluated(self, seconds: float, seed: bool = False) -> None:
        """A candidate took `seconds` from submission to result (`seed`: a seed's, see Pacer)."""
        if self.pacer is not None:
            self.pacer.evaluated(seconds, seed)

    def stats(self, *, workers: int, waiting: int, idle_workers: int) -> PaceStats | None:
        """The pace now, for the view (None inline)."""
        if self.pacer is None:
            return None
        now = self.clock()
        return self.pacer.stats(now, workers=workers, in_flight=self.outstanding, waiting=waiting,
                                idle_workers=idle_workers, oldest_s=self._oldest_s(now))

    def _finished(self, seq: int, _future: Future[Proposals]) -> None:
        self._done.append(seq)  # on the thread that completed the future

    def _oldest_s(self, now: float) -> float:
        return now - next(iter(self._pending.values()))[1] if self._pending else 0.0

    def _run(self, request: ProposalRequest) -> Answer:
        try:
            return Answer(request, propose(self.proposer, request))
        except Exception as e:  # a proposer's own fault: counted by the loop, the search goes on
            return Answer(request, Proposals(()), f"{type(e).__name__}: {e}")

    def close(self) -> None:
        """Stop taking work; requests in flight are abandoned (their answers discarded)."""
        for _, _, item in self._pending.values():
            if isinstance(item, Future):
                item.cancel()
        self._pending.clear()
