"""How many model requests to keep in flight: sized by the campaign itself, within the user's
ceilings.

The workers consume candidates at `workers / eval_s` a second; a request sent now is answered
after the model's latency L with `yield` new candidates. By Little's law the pipeline (candidates
waiting for a worker plus those expected from requests in flight) must hold about `rate * L` for
no worker to wait, and holding more only lets proposals go stale. So a request may start while

    waiting + in_flight * yield < rate * L_p90 * HEADROOM + workers

with L_p90 the 90th percentile of recent latencies (a jittery model is covered, not just its
median). Before the first answers L is unknown, but it is at least the age of the oldest request
in flight: the target then grows with time at the workers' rate, which sends requests at the
pace the workers will use their answers (a quick cold start without a guess).

The workers' rate is the executor's slots over a slot's seconds per candidate from submission to
result (Little's law: a GPU that holds two candidates takes each for twice its evaluation time),
the median of the recent ones. The seeds go first, to workers just started, and their times hold
the start-up (seconds: the GPU child, the device's ceilings, the task): they are not the pace.
Until a model's candidate was measured, each GPU is taken at the prior's pace or the seeds',
whichever is quicker: erring quick asks a few proposals early, erring slow starves the workers
for a whole latency.

On top, the ceilings: requests in flight, requests and tokens per window (a sliding log, so no
window of that length ever holds more than the limit, whatever the endpoint's own accounting,
and spread: no tenth of a window takes more than a tenth of the limit), and a congestion
window that halves on HTTP 429 (after which nothing is sent until Retry-After has passed) and
shrinks by 30% when latency climbs to twice its floor, and grows by one request per window
of answers (AIMD).

Pure: every method takes `now` (seconds on any monotonic clock); nothing here sleeps or reads
a clock, so the pacing is unit-tested on a virtual one.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from fsr.propose.llm_gate import RateLimit, WindowLimit

HEADROOM = 1.15  # on the p90 latency: answers bunch up, workers must not run dry in a gap
PRIOR_EVAL_S = 0.4  # a GPU's seconds per candidate before one was measured (2-3 a second)
EVAL_WINDOW = 32  # evaluations in the evaluation-time median
LATENCY_WINDOW = 64  # answers in the latency percentiles
COLD_ANSWERS = 16  # until this many answers, the oldest request's age bounds the latency from below
CLIMB = 2.0  # recent median latency over its floor that counts as congestion
CLIMB_DECREASE = 0.7  # the congestion window's factor when latency climbs (a 429 halves it)
EWMA = 0.1  # weight of a new yield / token count

__all__ = ["Ceilings", "PaceStats", "Pacer", "WindowLimit"]


@dataclass(frozen=True)
class Ceilings:
    """What a user allows: 0 = no limit. `window_s` is the "minute" of the per-minute limits
    (tests shorten it; a real endpoint counts 60 s)."""

    max_in_flight: int = 1024  # 8 GPUs at 2.5 candidates a second and a 30-s model need ~700
    requests_per_min: int = 0
    tokens_per_min: int = 0
    window_s: float = 60.0


@dataclass(frozen=True)
class PaceStats:
    """The pace at one instant, for the progress view."""

    latency_p50_s: float | None
    latency_p90_s: float | None
    requests_in_flight: int
    target_in_flight: int
    proposals_waiting: int
    workers_waiting: int
    throttled: int  # HTTP 429 answers seen


class Pacer:
    """See the module docstring. Feed it what happens (`evaluated`, `sent`, `answered`,
    `throttled`) and ask `allowance` how many requests may start now."""

    def __init__(self, ceilings: Ceilings = Ceilings(), gpus: int = 0) -> None:
        self.ceilings, self.gpus = ceilings, gpus
        self.requests = RateLimit(ceilings.requests_per_min, ceilings.window_s)
        self.tokens = RateLimit(ceilings.tokens_per_min, ceilings.window_s)
        self.eval_times: deque[float] = deque(maxlen=EVAL_WINDOW)  # a slot's seconds per candidate
        self.seed_eval_s: float | None = None  # the quickest seed's, start-up included
        self.yield_per_request = 1.0  # new candidates an answer brings (EWMA; 1 until measured)
        self.tokens_per_request = 0.0  # prompt + completion tokens of an answer (EWMA)
        self.latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.floor_s: float | None = None  # the lowest median latency seen (congestion-free)
        self.cwnd = float(ceilings.max_in_flight or 1 << 20)
        self.threshold = math.inf  # below it the window grows by one per answer
        self.hold_until = 0.0  # no request starts before (Retry-After)
        self.cut_at = -math.inf  # when the window was last cut (one cut per latency)
        self.throttles = 0
        self.answers = 0

    # ---- what happened ---------------------------------------------------------------------

    def evaluated(self, seconds: float, seed: bool = False) -> None:
        """A candidate took `seconds` from submission to result (in a worker's queue included).
        A `seed` (the baseline, sent first to cold workers) only bounds the prior: its time holds
        the worker's start-up, not the pace at which the workers will take the model's candidates."""
        if seed:
            self.seed_eval_s = min(self.seed_eval_s or math.inf, max(seconds, 1e-4))
        else:
            self.eval_times.append(max(seconds, 1e-4))

    @property
    def eval_s(self) -> float | None:
        """A slot's seconds per candidate: the median of the recent ones (None before one). A
        median, not a running mean: one cold evaluation (a worker's start-up, seconds) must not
        set the pace of the next dozens."""
        if not self.eval_times:
            return None
        return sorted(self.eval_times)[len(self.eval_times) // 2]

    def sent(self, now: float, requests: int = 1) -> None:
        """`requests` requests started now."""
        for _ in range(requests):
            self.requests.take(now)
            self.tokens.take(now, self.tokens_per_request)

    def answered(self, now: float, latency_s: float, candidates: int, tokens: int | None = None) -> None:
        """An answer came after `latency_s` with `candidates` new candidates (and its tokens)."""
        self.answers += 1
        self.latencies.append(latency_s)
        self.yield_per_request = (1 - EWMA) * self.yield_per_request + EWMA * candidates \
            if self.answers > 1 else float(candidates)
        if tokens:
            self.tokens_per_request = tokens if not self.tokens_per_request else \
                (1 - EWMA) * self.tokens_per_request + EWMA * tokens
        if len(self.latencies) >= 8:
            recent = sorted(list(self.latencies)[-8:])[4]  # the median of the last 8
            self.floor_s = recent if self.floor_s is None else min(self.floor_s, recent)
            if recent > CLIMB * self.floor_s and self._may_cut(now):
                self._cut(now, CLIMB_DECREASE)
                # Re-based: a latency that stays up is the model's (longer replies), not our
                # load; only a further climb cuts again, and a fall lowers the floor.
                self.floor_s = recent / CLIMB * 1.5
                return
        self.cwnd = min(self.cwnd + (1.0 if self.cwnd < self.threshold else 1.0 / self.cwnd), self._ceiling())

    def throttled(self, now: float, retry_after_s: float | None = None, in_flight: int | None = None) -> None:
        """The endpoint answered 429 (asking to wait `retry_after_s`, if it said)."""
        self.throttles += 1
        self.hold_until = max(self.hold_until, now + (retry_after_s or 1.0))
        if self._may_cut(now):
            if in_flight is not None:
                self.cwnd = min(self.cwnd, max(1.0, float(in_flight)))
            self._cut(now, 0.5)

    # ---- the decision ------------------------------------------------------------------------

    def target(self, now: float, workers: int, oldest_s: float = 0.0) -> float:
        """Candidates the pipeline should hold: the workers' rate times the model's latency
        (before the first answer, the age of the oldest request in flight), plus one per slot.
        `workers` counts the executor's slots (a GPU may hold several candidates): measured, the
        rate is slots over a slot's time per candidate (Little's law); before that, each GPU
        (`gpus`; one per slot if unknown) at the prior's pace or the seeds', whichever is quicker
        (a seed ran alone on its GPU, after its start-up: at most as fast as the GPU). Erring
        quick costs a few early proposals that wait; erring slow starves the workers for a
        latency."""
        eval_s = self.eval_s
        if eval_s:
            rate = workers / eval_s
        else:
            rate = (self.gpus or workers) / min(PRIOR_EVAL_S, self.seed_eval_s or math.inf)
        latency = self.percentile(0.9) or 0.0
        if len(self.latencies) < COLD_ANSWERS:  # the first answers are the fastest of a jittery model
            latency = max(latency, oldest_s)
        return rate * (latency or 0.0) * HEADROOM + workers

    def allowance(self, now: float, *, workers: int, in_flight: int, waiting: int, oldest_s: float = 0.0) -> int:
        """How many requests may start now: what the pipeline lacks, within the ceilings."""
        if now < self.hold_until:
            return 0
        lacking = self.target(now, workers, oldest_s) - waiting - in_flight * max(self.yield_per_request, 0.05)
        wanted = math.ceil(lacking / max(self.yield_per_request, 0.05)) if lacking > 0 else 0
        limit = min(self.cwnd, self._ceiling()) - in_flight
        rpm = self.requests.room(now)
        if self.tokens.limit and self.tokens_per_request:
            rpm = min(rpm, self.tokens.room(now) / self.tokens_per_request)
        return max(0, int(min(wanted, limit, rpm)))

    def in_flight_target(self, now: float, workers: int, oldest_s: float = 0.0) -> int:
        """The requests in flight the pace aims at (for the view)."""
        need = math.ceil(self.target(now, workers, oldest_s) / max(self.yield_per_request, 0.05))
        return int(min(need, self.cwnd, self._ceiling()))

    def percentile(self, q: float) -> float | None:
        """A percentile of the recent latencies, None before the first answer."""
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def stats(self, now: float, *, workers: int, in_flight: int, waiting: int, idle_workers: int,
              oldest_s: float = 0.0) -> PaceStats:
        return PaceStats(self.percentile(0.5), self.percentile(0.9), in_flight,
                         self.in_flight_target(now, workers, oldest_s), waiting, idle_workers, self.throttles)

    # ---- the congestion window ---------------------------------------------------------------

    def _ceiling(self) -> float:
        return float(self.ceilings.max_in_flight) if self.ceilings.max_in_flight else math.inf

    def _may_cut(self, now: float) -> bool:
        """One cut per latency: the answers of requests sent before a cut say nothing new."""
        return now - self.cut_at >= (self.percentile(0.5) or 1.0)

    def _cut(self, now: float, factor: float) -> None:
        self.cwnd = max(1.0, self.cwnd * factor)
        self.threshold = self.cwnd
        self.cut_at = now
