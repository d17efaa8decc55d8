"""A bad configuration costs that configuration, not the candidate: the bookkeeping, pure (no
CUDA; the parent and the child both use it; tests drive it with a fake child).

The GPU child tells the parent what it runs: "tuning trial BLOCK=1024" (with a deadline of its
own: a small multiple of the best trial so far), "checks and timing of the tuned BLOCK=512".
When the child hangs past that deadline or dies while running one configuration, the parent
records that configuration as failed (TIMEOUT or CRASH, with the reason), starts a new child and
sends the request again with the failed configurations listed (`EvalRequest.failed`): the tuning
answers them as infeasible without running them and goes on with the other values. A winner
that fails the full check in the child is recorded as failed there and the next best
configuration is checked in its place (child.Child.evaluate).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from fsr.evaluate.wire import Died, TimedOut
from fsr.types import Defines, Evaluation

TRIAL = "tuning trial "
TUNED = "checks and timing of the tuned "
TRIAL_DEADLINE_MULTIPLE = 10.0  # a trial may run this many times as long as the best trial so far...
TRIAL_DEADLINE_FLOOR_S = 2.0  # ...and at least this long
FIRST_TRIAL_DEADLINE_S = 8.0  # before any trial has finished
FAILED = "configurations that failed: "
MAX_FAILED = 4  # configurations that may fail before the candidate's verdict is the failure's
FALLBACKS = 3  # configurations checked in full, the tuning's best first

Failed = tuple[tuple[Defines, str], ...]  # configuration, and why it failed ("TIMEOUT: ...")
Reply = TypeVar("Reply")


def label(values: dict[str, int] | Defines) -> str:
    return " ".join(f"{k}={v}" for k, v in (values.items() if isinstance(values, dict) else values))


def trial_deadline_s(best_trial_s: float | None) -> float:
    """How long one tuning trial may run (its device part: checks and samples) before the parent
    kills the child and records it as TIMEOUT."""
    if best_trial_s is None:
        return FIRST_TRIAL_DEADLINE_S
    return max(TRIAL_DEADLINE_FLOOR_S, TRIAL_DEADLINE_MULTIPLE * best_trial_s)


def running(doing: str) -> Defines | None:
    """The configuration a note names (a tuning trial, or the tuned configuration's full check),
    None for any other note."""
    for prefix in (TRIAL, TUNED):
        if doing.startswith(prefix):
            pairs = [p.split("=", 1) for p in doing[len(prefix):].split()]
            if pairs and all(len(p) == 2 and p[1].lstrip("-").isdigit() for p in pairs):
                return tuple((k, int(v)) for k, v in pairs)
    return None


def failure(reply: object) -> tuple[Defines, str] | None:
    """The configuration a hang or a death happened in, and the reason to record for it; None
    when it happened outside any one configuration (the candidate's own failure)."""
    if isinstance(reply, TimedOut):
        values = running(reply.doing)
        return None if values is None else (values, f"TIMEOUT: still running after {reply.seconds:.1f} s during "
                                                    f"{reply.doing}; the GPU child was replaced")
    if isinstance(reply, Died):
        for prefix in (TRIAL, TUNED):
            at = reply.reason.rfind(f"(during {prefix}")
            if at >= 0:
                values = running(reply.reason[at + len("(during "):].rstrip(")"))
                if values is not None:
                    return values, f"CRASH: {reply.reason[:at].strip()}"
    return None


def with_retries(call: Callable[[Failed], Reply], tunables: set[str]) -> tuple[Reply, Failed]:
    """`call(failed)` until its reply is not a hang or death in one configuration, or MAX_FAILED
    configurations have failed; the last reply and the configurations that failed. A failure in
    a configuration of no tunable (the candidate's own, untuned) is the candidate's."""
    failed: Failed = ()
    while True:
        reply = call(failed)
        found = failure(reply)
        if found is None or not tunables or len(failed) >= MAX_FAILED:
            return reply, failed
        values, reason = found
        key = tuple((k, v) for k, v in values if k in tunables)
        if not key or any(k == key for k, _ in failed):
            return reply, failed
        failed += ((key, reason),)


def summary(failed: Failed) -> str:
    """Which configurations failed and how, for the verdict's message ("" if none)."""
    if not failed:
        return ""
    return FAILED + "; ".join(f"{label(values)}: {reason}" for values, reason in failed)


def noting(result: Evaluation, failed: Failed) -> Evaluation:
    """`result` with the configurations that hung or crashed a child first in its message."""
    text = summary(failed)
    if not text:
        return result
    if result.message.startswith(FAILED):  # the child's own list: one list
        return replace(result, message=f"{text}; {result.message[len(FAILED):]}")
    return replace(result, message=f"{result.message}; {text}" if result.message else text)


def known_failure(values: Defines, failed: Failed) -> str | None:
    """The reason recorded for this configuration in `failed` (order of names aside), or None."""
    return next((reason for v, reason in failed if dict(v) == dict(values)), None)
