"""The offline proposer's moves on a kernel's own text: source transforms, launch-space
rewrites and tunable values (the main moves for a task without a feature template)."""

from __future__ import annotations

import functools
import random
import re
from dataclasses import replace

from fsr.candidate import with_defines
from fsr.propose import launch_space, transforms
from fsr.propose.base import ProposalRequest
from fsr.propose.move_memory import Made, MoveMemory, candidate_key
from fsr.types import Candidate, Task


class SourceMoves:
    """Rewrites of the request's first parent; each returns a `Made` or None where none is new.
    Rewrites that do not depend on the rng are computed once per parent (`MoveMemory.remember`)."""

    def __init__(self, memory: MoveMemory) -> None:
        self.memory = memory

    def transform(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        wanted = [t for f in request.features_wanted for t in transforms.BY_FEATURE.get(f, ())]
        rest = [t for t in transforms.ALL if t not in wanted]
        rng.shuffle(wanted)
        rng.shuffle(rest)
        parent = request.parents[0].candidate
        for transform in wanted + rest:
            if transform in transforms.RANDOM:
                result = _transformed(parent, request.task, transform, rng)
            else:
                result = self.memory.remember((candidate_key(parent), request.task.content_hash, transform),
                                              functools.partial(_transformed, parent, request.task, transform, rng))
            if result is not None and not self.memory.made_before(request, result):
                return result
        return None

    def launch(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        """The first launch-space rewrite of the parent not made before."""
        parent = request.parents[0].candidate
        options = self.memory.remember((candidate_key(parent), request.task.content_hash, "launch"),
                                       lambda: list(launch_space.rewrites(parent, request.task)))
        for text, move in options:
            made = Made(text, move)
            if not self.memory.made_before(request, made):
                return made
        return None

    def tunable(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        """A different value of one tunable: as a define, or as the default (the header reordered)."""
        parent = request.parents[0].candidate
        options = [t for t in parent.tunables if len(t.values) > 1]
        if not options:
            return None
        t = rng.choice(options)
        current = dict(parent.resolved_defines())[t.name]
        value = rng.choice([v for v in t.values if v != current] or list(t.values))
        if rng.random() < 0.5:
            return Made(with_defines(parent, {t.name: value}), f"tunable {t.name}={value}")
        return Made(_reorder(parent, t.name, value), f"tunable {t.name} default {value}", drop=(t.name,))


def _transformed(parent: Candidate, task: Task, transform: transforms.Transform, rng: random.Random) -> Made | None:
    """A transform's result as a move: a body-only rewrite keeps the parent's header records."""
    made = transform(parent, task, rng)
    if made is None:
        return None
    text, move = made
    if transforms.split(text)[0] == transforms.split(parent.source)[0]:
        return Made(replace(parent, source=text), move)
    return Made(text, move)


def _reorder(cand: Candidate, name: str, value: int) -> str:
    """The candidate's text with `value` moved first in its tunable's declared list."""
    t = next(t for t in cand.tunables if t.name == name)
    values = [value] + [v for v in t.values if v != value]
    line = re.compile(rf"^(\s*{re.escape(name)}\s*=\s*)\[[^\]]*\]", re.M)
    return line.sub(lambda m: m.group(1) + "[" + ", ".join(map(str, values)) + "]", cand.source, count=1)
