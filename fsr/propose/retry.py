"""Retries of one chat call and the handling of HTTP 429: backoff, Retry-After, throttles told
to the endpoint's gate and to the caller.

A call is retried (up to `llm.retries` times) after a timeout, a failed connection, HTTP 408,
409, 429 or any 5xx; every other status fails at once. The wait is the server's Retry-After
where it gives one (more than `llm.max_wait_s` gives up at once), else `llm.backoff_s` doubled
per attempt, with jitter. A 429 holds every caller of the endpoint (`CallGate.throttled`) and is
reported to the task that met it (`THROTTLES`), so the search can pace itself.

Nothing here knows the client library: fsr.propose.llm_client, the one module that imports
`openai`, turns each of its errors into an AttemptFailed before it reaches this loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import random
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from fsr.config import LLMConfig
from fsr.propose.llm_gate import CallGate

RETRIED_STATUS = frozenset({408, 409, 429})  # and every 5xx

# The Retry-After of each 429 met by the task's calls (set per `complete_async`; the per-sample
# calls it gathers add to the same list).
THROTTLES: contextvars.ContextVar[list[float | None] | None] = contextvars.ContextVar("fsr_throttles", default=None)
# The gate entries of the call this task is making: its request hook dates them to when the
# request leaves, not to when the call entered the gate (the SDK's own work lies between).
SENT: contextvars.ContextVar[tuple[CallGate, list[list[float]]] | None] = contextvars.ContextVar("fsr_sent", default=None)


class AttemptFailed(Exception):
    """One attempt that failed, as the client's seam (fsr.propose.llm_client) describes it.
    `kind`: "status" (the server answered `status`, with `headers`), "timeout" (no reply in
    time), "connection" (the request did not get through) or "bad" (an unreadable response)."""

    def __init__(self, kind: str, text: str, status: int = 0, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(text)
        self.kind, self.status, self.headers = kind, status, headers


class CallFailed(Exception):
    """A call that failed for good (after `attempts` tries); the message says why."""

    def __init__(self, message: str, attempts: int = 1) -> None:
        super().__init__(message)
        self.attempts = attempts


async def sending(request: Any) -> None:
    """The HTTP client's request hook: the request is leaving now (see SENT)."""
    if (sent := SENT.get()) is not None:
        sent[0].sending(sent[1])


async def with_retries(send: Callable[[dict[str, Any]], Awaitable[Any]], kwargs: dict[str, Any], config: LLMConfig,
                       gate: CallGate, worst_tokens: int, prompt_tokens: int,
                       redact: Callable[[str], str]) -> tuple[Any, int]:
    """`send(kwargs)` retried as the module docstring says: (the response, attempts made). Each
    attempt passes the gate (so retries count against the endpoint's ceilings) and a 429 holds
    every caller of it. Raises CallFailed, its message passed through `redact`."""
    last = ""
    for attempt in range(1, config.retries + 2):
        wait = backoff_s(config, attempt)
        entry = await gate.enter(worst_tokens)
        used = prompt_tokens  # what the endpoint may count for a failed attempt
        SENT.set((gate, entry))
        try:
            response = await send(kwargs)
            usage = getattr(response, "usage", None)
            used = int(getattr(usage, "total_tokens", 0) or 0) or worst_tokens
            return response, attempt
        except AttemptFailed as e:
            last, wait = _retried(e, attempt, wait, config, gate, redact)
            if e.status == 429:
                used = 0  # refused, not counted
        finally:
            gate.leave(entry, used)
        if attempt <= config.retries:
            await asyncio.sleep(wait)  # outside the gate: waiting does not hold a call slot
    raise CallFailed(redact(f"gave up after {config.retries + 1} attempts: {last}"), config.retries + 1)


def _retried(e: AttemptFailed, attempt: int, wait: float, config: LLMConfig, gate: CallGate,
             redact: Callable[[str], str]) -> tuple[str, float]:
    """(what went wrong, the wait before the next attempt) for a failure worth retrying; raises
    CallFailed for one that is not. A 429 holds the gate and is told to the task (THROTTLES)."""
    if e.kind == "bad":
        raise CallFailed(redact(f"bad response: {e}"), attempt) from None
    if e.kind != "status":
        return (f"no reply within {config.timeout_s:g} s" if e.kind == "timeout" else f"connection failed: {e}"), wait
    last = f"HTTP {e.status}: {e}"
    if e.status not in RETRIED_STATUS and e.status < 500:
        raise CallFailed(redact(f"{last} (not retried)"), attempt) from None
    asked = retry_after_s(e.headers)
    if asked is not None:
        if asked > config.max_wait_s:
            raise CallFailed(redact(f"{last}; the server asks to wait {asked:.0f} s, more "
                                    f"than max_wait_s {config.max_wait_s:.0f} s"), attempt) from None
        wait = asked
    if e.status == 429:
        gate.throttled(wait if asked is not None else None)
        if (met := THROTTLES.get()) is not None:
            met.append(asked)
    return last, wait


def backoff_s(config: LLMConfig, attempt: int) -> float:
    """The wait before retrying `attempt` when the server names none."""
    base = min(config.max_wait_s, config.backoff_s * 2 ** (attempt - 1))
    return base * random.uniform(0.5, 1.0)  # jitter: clients that failed together spread out


def retry_after_s(headers: Mapping[str, str] | None) -> float | None:
    """Seconds a server asks to wait: `retry-after-ms`, or `retry-after` in seconds or as an HTTP
    date; None when absent or unreadable."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())

