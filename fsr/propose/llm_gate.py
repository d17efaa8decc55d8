"""What stands between a model request and the endpoint: the budgets (tokens, money) and the
ceilings of one endpoint (calls in flight, calls and tokens per window, a Retry-After hold),
enforced where calls are made, so retries and per-sample calls count too.

Budgets are exact under concurrency: a call reserves its worst case (prompt tokens bounded from
its bytes, plus `max_tokens` per choice) before it is sent and settles to the usage the server
reports after; a call whose worst case does not fit waits for calls in flight to settle, and is
refused once nothing is in flight. So no budget is overrun by calls in flight. The prompt bound
is the prompt's bytes (a token is at least a byte) until the server has reported usage, then
1.25 times the highest tokens-per-byte it reported.

Every request of the process runs on one event-loop thread (`submit`): hundreds in flight cost
a coroutine each, not a thread.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
PROMPT_MARGIN = 1.25  # over the highest tokens-per-byte a server reported
MESSAGE_TOKENS = 8  # a chat message's own tokens (role, separators) beyond its text
ARRIVAL_JITTER_S = 0.5  # how much later than sent a request may reach the server's rate window

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def submit(coro: Coroutine[Any, Any, T]) -> Future[T]:
    """Run a coroutine on the process's model-request loop (started on first use)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="fsr-llm-loop", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coro, _loop)


class WindowLimit:
    """At most `limit` units (calls, tokens) taken in any `window_s` seconds: a log of (time,
    amount) entries, an entry taken as a worst case settled to the real amount later. A sliding
    log is stricter than a token bucket or a fixed window, so an endpoint that counts either way
    sees no more than the limit. An amount above the limit goes through only into an empty
    window (one call's worth of overrun, said in the docs). 0 = no limit."""

    def __init__(self, limit: float, window_s: float = 60.0) -> None:
        self.limit, self.window_s = limit, window_s
        self._log: deque[list[float]] = deque()  # [time, amount], oldest first

    def used(self, now: float) -> float:
        # Entries may be re-dated later (CallGate.sending), so the log is sorted only roughly:
        # an expired entry behind a re-dated one waits for it, which only errs on the safe side.
        while self._log and self._log[0][0] <= now - self.window_s:
            self._log.popleft()
        return sum(e[1] for e in self._log)

    def fits(self, now: float, amount: float = 1.0) -> bool:
        if not self.limit:
            return True
        used = self.used(now)
        return used + amount <= self.limit or used == 0

    def room(self, now: float) -> float:
        """Units that may be taken now (infinite without a limit)."""
        return math.inf if not self.limit else max(0.0, self.limit - self.used(now))

    def wait_s(self, now: float, amount: float = 1.0) -> float:
        """Seconds until `amount` fits (0 if it fits now)."""
        if self.fits(now, amount):
            return 0.0
        used = self.used(now)
        for t, a in self._log:
            used -= a
            if used + amount <= self.limit or used <= 0:
                return max(0.0, t + self.window_s - now)
        return 0.0

    def take(self, now: float, amount: float = 1.0) -> list[float]:
        """Record `amount` at `now`; the entry may be passed to `settle`."""
        entry = [now, amount]
        if self.limit:
            self._log.append(entry)
        return entry

    @staticmethod
    def settle(entry: list[float], amount: float) -> None:
        """Replace a reserved worst case with what was really used."""
        entry[1] = amount


class RateLimit:
    """`limit` a window, and spread: no tenth of the window takes more than a tenth of the limit
    (rounded up). Endpoints enforce per-minute limits over shorter periods too (OpenAI says its
    limits may be quantized), and a burst of a whole minute's calls at once is what gets 429s."""

    SLICES = 10

    def __init__(self, limit: float, window_s: float = 60.0) -> None:
        self.limit = limit
        self.whole = WindowLimit(limit, window_s)
        self.slice = WindowLimit(math.ceil(limit / self.SLICES), window_s / self.SLICES)

    def fits(self, now: float, amount: float = 1.0) -> bool:
        return self.whole.fits(now, amount) and self.slice.fits(now, amount)

    def room(self, now: float) -> float:
        return min(self.whole.room(now), self.slice.room(now))

    def wait_s(self, now: float, amount: float = 1.0) -> float:
        return max(self.whole.wait_s(now, amount), self.slice.wait_s(now, amount))

    def take(self, now: float, amount: float = 1.0) -> list[list[float]]:
        return [self.whole.take(now, amount), self.slice.take(now, amount)]

    @staticmethod
    def settle(entries: list[list[float]], amount: float) -> None:
        for e in entries:
            WindowLimit.settle(e, amount)


@dataclass
class Reservation:
    tokens: int
    cost_usd: float


class Meter:
    """Tokens and money spent, and reserved by calls in flight, by every client sharing it (an
    ensemble shares one). Thread-safe."""

    def __init__(self, max_cost: float = 0.0, max_total_tokens: int = 0) -> None:
        self.max_cost, self.max_total_tokens = max_cost, max_total_tokens
        self.cost_usd = 0.0
        self.tokens = 0
        self.reserved = Reservation(0, 0.0)
        self.tokens_per_byte = 0.0  # the highest prompt tokens per byte a server reported
        self._refused = ""  # set once a call's worst case could not fit: the budget is spent
        self._lock = threading.Lock()

    def charge(self, tokens: int, cost_usd: float) -> None:
        with self._lock:
            self.tokens += tokens
            self.cost_usd += cost_usd

    def refusal(self) -> str | None:
        """Why no further call may be made (the budget is spent), or None."""
        with self._lock:
            if self._refused:
                return self._refused
            if self.max_cost and self.cost_usd >= self.max_cost:
                return f"LLM budget spent: ${self.cost_usd:.4f} of max_cost ${self.max_cost:.4f}; no further calls"
            if self.max_total_tokens and self.tokens >= self.max_total_tokens:
                return (f"LLM budget spent: {self.tokens} tokens of max_total_tokens "
                        f"{self.max_total_tokens}; no further calls")
        return None

    def prompt_bound(self, prompt_bytes: int, messages: int) -> int:
        """The most tokens a prompt of this size can be (see the module docstring)."""
        per_byte = min(1.0, self.tokens_per_byte * PROMPT_MARGIN) if self.tokens_per_byte else 1.0
        return math.ceil(prompt_bytes * per_byte) + MESSAGE_TOKENS * messages

    def learn(self, prompt_bytes: int, prompt_tokens: int) -> None:
        """A server's usage report for a prompt of known size tightens the prompt bound."""
        if prompt_bytes > 0 and prompt_tokens > 0:
            with self._lock:
                self.tokens_per_byte = max(self.tokens_per_byte, prompt_tokens / prompt_bytes)

    def reserve(self, worst: Reservation) -> Reservation | str | None:
        """Reserve a call's worst case: the reservation; None while it does not fit only because
        of calls in flight (wait and ask again); the refusal once it cannot fit."""
        with self._lock:
            over_tokens = self.max_total_tokens and \
                self.tokens + self.reserved.tokens + worst.tokens > self.max_total_tokens
            over_cost = self.max_cost and self.cost_usd + self.reserved.cost_usd + worst.cost_usd > self.max_cost
            if not over_tokens and not over_cost:
                self.reserved.tokens += worst.tokens
                self.reserved.cost_usd += worst.cost_usd
                return worst
            if self.reserved.tokens or self.reserved.cost_usd:
                return None
            self._refused = (f"LLM budget spent: {self.tokens} tokens, ${self.cost_usd:.4f} used; a call could "
                             f"use up to {worst.tokens} tokens, ${worst.cost_usd:.4f}, more than the budget has "
                             "left; no further calls")
            return self._refused

    def settle(self, reservation: Reservation, tokens: int, cost_usd: float) -> None:
        """A call ended: its reservation is released and what it used is charged."""
        with self._lock:
            self.reserved.tokens -= reservation.tokens
            self.reserved.cost_usd -= reservation.cost_usd
            self.tokens += tokens
            self.cost_usd += cost_usd


class CallGate:
    """The ceilings of one endpoint, shared by the clients that call it. Used from the model
    loop's thread only. Callers queue in order (one asyncio lock), so one waiter polls."""

    def __init__(self, max_in_flight: int = 0, requests_per_min: int = 0, tokens_per_min: int = 0,
                 window_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        # A call is counted from when its request leaves; the server counts from when it
        # arrives, a little later and with jitter (network, the server's threads, a loaded
        # client): a longer window absorbs that, half a second beyond 2%.
        self.max_in_flight, self.clock = max_in_flight, clock
        self.requests = RateLimit(requests_per_min, window_s * 1.02 + ARRIVAL_JITTER_S)
        self.tokens = RateLimit(tokens_per_min, window_s * 1.02 + ARRIVAL_JITTER_S)
        self.in_flight = 0
        self.hold_until = 0.0
        self.throttles: deque[tuple[float, float | None]] = deque()  # appended and taken atomically
        self._lock: asyncio.Lock | None = None
        self._left: asyncio.Event | None = None

    def wait_s(self, tokens: int) -> float:
        """Seconds until a call of `tokens` may go (0: now; inf: when a call in flight ends)."""
        now = self.clock()
        if self.max_in_flight and self.in_flight >= self.max_in_flight:
            return math.inf
        return max(self.hold_until - now, self.requests.wait_s(now), self.tokens.wait_s(now, tokens), 0.0)

    async def enter(self, tokens: int) -> list[list[float]]:
        """Wait until a call of (at most) `tokens` may be sent; its entries, for `leave`."""
        if self._lock is None:
            self._lock, self._left = asyncio.Lock(), asyncio.Event()
        assert self._left is not None
        async with self._lock:
            while (wait := self.wait_s(tokens)) > 0:
                self._left.clear()
                try:
                    await asyncio.wait_for(self._left.wait(), None if math.isinf(wait) else wait)
                except TimeoutError:
                    pass
            now = self.clock()
            self.in_flight += 1
            return self.requests.take(now) + self.tokens.take(now, tokens)

    def sending(self, entries: list[list[float]]) -> None:
        """The call's request leaves now: it counts in the windows from now (later than when
        it entered, never earlier, so no window the server sees holds more than the limit)."""
        now = self.clock()
        for e in entries:
            e[0] = max(e[0], now)

    def leave(self, entries: list[list[float]], tokens: int) -> None:
        """A call ended having used `tokens` (0 if it failed before the server counted any)."""
        self.in_flight -= 1
        RateLimit.settle(entries[2:], tokens)
        if self._left is not None:
            self._left.set()

    def throttled(self, retry_after_s: float | None) -> None:
        """The endpoint answered 429: every caller waits as long as it asked (1 s if it did not
        say), and the pace hears of it (`throttles`)."""
        self.hold_until = max(self.hold_until, self.clock() + (retry_after_s or 1.0))
        self.throttles.append((self.clock(), retry_after_s))

    def take_throttles(self) -> list[tuple[float, float | None]]:
        """The 429s since the last look: (clock time, Retry-After seconds or None). Any thread."""
        out = []
        while self.throttles:
            out.append(self.throttles.popleft())
        return out
