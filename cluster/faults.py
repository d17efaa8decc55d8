"""Cluster faults in fsr's words, and the rule that keeps them from becoming kernels' verdicts.

A worker's call either returns an Evaluation (whatever the GPU child said about the kernel: OK,
WRONG, CRASH when the child died under it, TIMEOUT when its watchdog fired) or fails at
`ray.get` with one of Ray's exceptions. The second kind is the infrastructure's: the actor's
process died (ActorDiedError, WorkerCrashedError), it cannot be reached (ActorUnavailableError,
RayActorError), its node went away (NodeDiedError), the result was lost (ObjectLostError,
OwnerDiedError), Ray itself failed (RaySystemError), or the evaluator broke its protocol and
raised (RayTaskError). None of these says anything about the candidate, so it is evaluated
again elsewhere and no verdict is recorded for the failure.

One exception to that: a candidate that was running on every one of `limit` consecutive worker
losses is taken to be the cause ("poison": it takes down whatever evaluates it) and gets CRASH,
or TIMEOUT when every loss was an unanswered call. Losses while a candidate only waited in an
actor's queue, or while its node was known to be gone, do not count against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ray.exceptions import (
    ActorDiedError,
    ActorUnavailableError,
    NodeDiedError,
    ObjectLostError,
    OutOfMemoryError,
    OwnerDiedError,
    RayActorError,
    RaySystemError,
    RayTaskError,
    WorkerCrashedError,
)

from fsr.types import Candidate, Evaluation, Verdict

POISON_AFTER = 3  # consecutive losses with a candidate running before it is blamed


def first_line(e: BaseException) -> str:
    """The exception type and its most telling line: for an actor error, Ray's explanation
    (the lines after its generic first line and the indented id fields)."""
    lines = [x for x in str(e).strip().splitlines() if x.strip()]
    detail = [x for x in lines[1:] if not x.startswith("\t")]
    text = detail[0] if isinstance(e, RayActorError) and detail else (lines[0] if lines else "")
    return f"{type(e).__name__}: {text.strip()}"[:300]


def describe_loss(e: BaseException, node_ip: str, node_gone: bool) -> str:
    """What happened to a worker, in a few words, with Ray's exception class for reference."""
    kind = type(e).__name__
    if isinstance(e, RayTaskError):
        return f"its evaluator raised {first_line(e.cause or e)}"
    if node_gone or isinstance(e, NodeDiedError):
        what = f"its node {node_ip or '?'} is gone"
    elif isinstance(e, ActorUnavailableError):
        what = "it cannot be reached"
    elif isinstance(e, OutOfMemoryError):
        what = "Ray killed it for lack of host memory"
    elif isinstance(e, (ActorDiedError, WorkerCrashedError)):
        what = "its process died"
    elif isinstance(e, RayActorError):
        what = "its actor failed"
    elif isinstance(e, (OwnerDiedError, ObjectLostError)):
        what = "its result was lost from the object store"
    elif isinstance(e, RaySystemError):
        what = "Ray failed"
    else:
        what = "Ray could not deliver its result"
    return f"{what} ({kind})"


@dataclass
class Strikes:
    """Losses of a worker with a candidate running, per candidate id, until `limit` blames it."""

    limit: int = POISON_AFTER
    reasons: dict[str, list[tuple[str, bool]]] = field(default_factory=dict)

    def add(self, candidate: Candidate, reason: str, unanswered: bool) -> bool:
        """Count one loss against `candidate`; True when it has now reached the limit."""
        self.reasons.setdefault(candidate.id, []).append((reason, unanswered))
        return len(self.reasons[candidate.id]) >= self.limit

    def forget(self, candidate_id: str) -> None:
        """The candidate came back with a result: its earlier losses were not its doing."""
        self.reasons.pop(candidate_id, None)

    def verdict(self, candidate: Candidate, device: str) -> Evaluation:
        """CRASH (TIMEOUT when no loss was more than a call left unanswered) for a candidate
        that reached the limit; the message lists every loss."""
        losses = self.reasons.pop(candidate.id, [])
        verdict = Verdict.TIMEOUT if losses and all(u for _, u in losses) else Verdict.CRASH
        listed = "; ".join(reason for reason, _ in losses)
        message = (f"every worker that evaluated it was lost ({len(losses)} in a row): {listed}")
        return Evaluation(candidate_id=candidate.id, task=candidate.task, verdict=verdict,
                          message=message[:2000], device=device)
