"""What the offline proposer has made, checked and rewritten before, so that a parent chosen
again yields something new and a known result is not checked twice."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fsr import expr
from fsr.candidate import check
from fsr.propose import transforms
from fsr.propose.base import ProposalRequest, Scored
from fsr.types import Candidate, Task


@dataclass(frozen=True)
class Made:
    """A move's result: new text (the parent's defines are carried over, but those named in
    `drop`) or a whole candidate; what the move did; how many of the request's parents it used
    (or the one kernel it was built on, when that is not the request's first parent)."""

    result: str | Candidate
    move: str
    parents: int = 1
    drop: tuple[str, ...] = ()
    parent: Scored | None = None  # built on this kernel, not on the request's first parent


Move = Callable[[ProposalRequest, random.Random], "Made | None"]
MEMORY_MAX = 200_000  # moves (and checks) remembered before the memory is cleared


class MoveMemory:
    """Moves made (by result), kernels proposed, checks passed and rewrites computed."""

    def __init__(self) -> None:
        # Moves already made (by result), so that a parent chosen again yields something new
        # instead of a duplicate the loop would drop; also spares re-checking a known result.
        self._made: set[tuple] = set()
        self._checked: set[tuple] = set()
        # Kernels proposed (by `kernel_key`): a tunable's value set as a define and the same
        # value moved first in the header are one kernel, proposed once.
        self._kernels: set[tuple] = set()
        # Results of the rewrites that do not depend on the rng, by (parent, rewrite): an
        # exhausted neighbourhood is asked again and again before the task stops.
        self._rewritten: dict[tuple, object] = {}

    def _made_key(self, request: ProposalRequest, made: Made) -> tuple:
        """Keys use Python's string hash, which a string caches, not the candidate's sha256 id:
        most moves keep the parent's source object, and repeats are common once a neighbourhood
        is mined."""
        if isinstance(made.result, Candidate):
            return candidate_key(made.result)
        return (request.task.name, hash(made.result), len(made.result), request.parents[0].candidate.defines,
                made.drop)

    def made_before(self, request: ProposalRequest, made: Made) -> bool:
        """Whether this result was made before or is a parent (nothing is remembered)."""
        key = self._made_key(request, made)
        return key in self._made or any(key == candidate_key(p.candidate) for p in request.parents)

    def repeat(self, request: ProposalRequest, made: Made) -> bool:
        """Whether this result was made before, or is a parent (remember it if not)."""
        if self.made_before(request, made):
            return True
        key = self._made_key(request, made)
        if len(self._made) > MEMORY_MAX:
            self._made.clear()
        self._made.add(key)
        return False

    def same_kernel(self, request: ProposalRequest, cand: Candidate) -> bool:
        """Whether `cand` is a kernel proposed before or a parent (remember it if not)."""
        key = kernel_key(cand)
        if key in self._kernels or any(key == kernel_key(p.candidate) for p in request.parents):
            return True
        if len(self._kernels) > MEMORY_MAX:
            self._kernels.clear()
        self._kernels.add(key)
        return False

    def check(self, cand: Candidate, task: Task) -> None:
        """`fsr.candidate.check`, memoised on what it reads: the source (kernel signatures), the
        header records, and the defines its expressions use (toggling a switch that no launch
        expression names cannot change the outcome). Raises HeaderError."""
        used: set[str] = set()
        for launch in cand.launches:
            for text in launch.grid + launch.block + (launch.smem,):
                used |= expr.names_in(text)
        key = (task.name, task.content_hash, hash(cand.source), len(cand.source), cand.launches, cand.scratch,
               cand.tunables, cand.features, tuple(d for d in cand.resolved_defines() if d[0] in used))
        if key not in self._checked:
            check(cand, task)  # raises before the key is remembered
            if len(self._checked) > MEMORY_MAX:
                self._checked.clear()
            self._checked.add(key)

    def remember(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """`compute()`, once per key (a rewrite of a parent that does not depend on the rng)."""
        if key not in self._rewritten:
            if len(self._rewritten) > MEMORY_MAX // 10:
                self._rewritten.clear()
            self._rewritten[key] = compute()
        return self._rewritten[key]


def candidate_key(cand: Candidate) -> tuple:
    """What identifies a candidate (as its id does), from cheap, cached hashes."""
    return (cand.task, hash(cand.source), len(cand.source), cand.resolved_defines(), cand.launches,
            cand.scratch, cand.compile_options)


def kernel_key(cand: Candidate) -> tuple:
    """What makes two candidates the same kernel launched the same way: the code after the
    header, launches, scratch, features, the compiled values and each tunable's set of values,
    but not the order they are listed in (the default only starts the tuner)."""
    tunables = frozenset((t.name, frozenset(t.values)) for t in cand.tunables)
    return (cand.task, hash(transforms.split(cand.source)[1]), cand.launches, cand.scratch, cand.features,
            tunables, cand.resolved_defines(), cand.compile_options)
