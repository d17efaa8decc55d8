"""Identity by what runs: a candidate whose compiled program and launch header this evaluator has
judged before is answered from that judgement, without GPU time.

A model that sends its parent back with a new comment, a renamed local or an unused helper sends
a new candidate id (ids hash the source) but the same cubin: judging it again would spend a
GPU child's time to learn nothing. What runs is the cubin and the launch header (the launches,
the tunables and features with their values, the scratch buffers, the tensor maps). Where the candidate's
tunables are tuned, the tuning runs programs compiled at other values than the candidate's own,
which the one cubin does not show, so the key holds the source too, without its comments and
blank space (a comment still costs nothing; a changed line does).

Per evaluator (one GPU worker): the memo holds what this worker judged, on its device, with its
configuration. Two workers may each judge the same program once. Certification requests are never
answered from it (certifying is judging again).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import replace

from fsr.candidate import strip_comments
from fsr.evaluate.compile import Compiled
from fsr.types import Candidate, Evaluation, Verdict

# The verdicts that are the program's own: a crash or a hang may be the machinery's or a passing
# fault of the host (a child killed under memory pressure), so those are judged again.
KEPT = frozenset({Verdict.OK, Verdict.SUSPECT, Verdict.WRONG, Verdict.LAUNCH_ERROR, Verdict.REJECTED})
MAX_ENTRIES = 4096  # judgements kept (each a few kB: samples, checks, trials)
WAIT_S = 600.0  # longest wait for an identical program judged by another call meanwhile


def key(cand: Candidate, compiled: Compiled, tune_trials: int) -> str:
    """What identifies the judgement of `cand` compiled to `compiled`, tuned with `tune_trials`
    trials (0: not tuned)."""
    h = hashlib.sha256()
    tuned = tune_trials > 0 and any(len(t.values) > 1 for t in cand.tunables)
    parts = [cand.task, repr(compiled.lowered), repr(cand.launches), repr(cand.tunables), repr(cand.features),
             repr(cand.scratch), repr(cand.tensormaps), repr(cand.resolved_defines()),
             f"trials {tune_trials if tuned else 0}",  # nothing to tune: judged alike (a task's baseline)
             _code(cand.source) if tuned else ""]
    h.update(compiled.cubin)
    for part in parts:
        h.update(b"\0")
        h.update(part.encode())
    return h.hexdigest()


def _code(source: str) -> str:
    """The source without comments, each line's surrounding space, nor blank lines."""
    lines = (line.strip() for line in strip_comments(source).splitlines())
    return "\n".join(line for line in lines if line)


def answer(earlier: Evaluation, cand: Candidate, compile_s: float) -> Evaluation:
    """`earlier`'s judgement given to `cand`: its verdict, checks, timing, tuned defines and
    resources, with no trials and no stage time of its own (no GPU work was done for it). A
    judgement of `cand` itself (a task's baseline, judged as its task was prepared) names no
    earlier candidate."""
    since = earlier.candidate_id if earlier.candidate_id != cand.id else ""
    return replace(earlier, candidate_id=cand.id, answered_from=since, trials=(), tune_trials=0,
                   compile_s=compile_s, verify_s=0.0, tune_s=0.0, bench_s=0.0, wall_s=0.0, setup_s=0.0,
                   comparators_s=0.0, worker="")


class Judgements:
    """Judgements by `key`, the least recently used dropped past `max_entries`. A call that finds
    its key being judged by another call waits for that judgement rather than judging it twice.
    Thread-safe: an evaluator runs several calls at once."""

    def __init__(self, max_entries: int = MAX_ENTRIES, wait_s: float = WAIT_S):
        """`max_entries` 0: nothing is kept, every claim is the caller's to judge."""
        self.max_entries, self.wait_s = max_entries, wait_s
        self._done: OrderedDict[str, Evaluation] = OrderedDict()
        self._running: dict[str, tuple[threading.Event, int]] = {}  # key -> its judgement's end, the judging thread
        self._lock = threading.Lock()

    def claim(self, judgement: str) -> Evaluation | None:
        """The judgement under this key, if there is one (waiting for one under way); else None,
        and the caller judges it and must `settle` the key (or `abandon` it)."""
        if self.max_entries <= 0:
            return None
        while True:
            with self._lock:
                if judgement in self._done:
                    self._done.move_to_end(judgement)
                    return self._done[judgement]
                running = self._running.get(judgement)
                if running is None:
                    self._running[judgement] = (threading.Event(), threading.get_ident())
                    return None
                if running[1] == threading.get_ident():  # claimed further up this call (a task's
                    return None  # baseline judged while the baseline itself is the candidate): no wait
            if not running[0].wait(self.wait_s):
                return None  # judged for too long elsewhere: judge it here too

    def settle(self, judgement: str, evaluation: Evaluation) -> None:
        """The claimed key's judgement; kept if its verdict is the program's own (KEPT)."""
        with self._lock:
            if evaluation.verdict in KEPT and not evaluation.answered_from:
                self._done[judgement] = evaluation
                self._done.move_to_end(judgement)
                while len(self._done) > self.max_entries:
                    self._done.popitem(last=False)
            running = self._running.pop(judgement, None)
        if running is not None:
            running[0].set()

    def abandon(self, judgement: str) -> None:
        """The claimed key was not judged (the call failed): a waiting call judges it itself."""
        with self._lock:
            running = self._running.pop(judgement, None)
        if running is not None:
            running[0].set()
