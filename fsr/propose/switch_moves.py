"""The offline proposer's moves on a task's feature template: bold starts, stacking and pruning
switches, toggling the requested ones, and crossing two parents' switches."""

from __future__ import annotations

import math
import random

from fsr.candidate import HeaderError, parse, with_defines
from fsr.propose.base import ProposalRequest, Scored
from fsr.propose.features import feature_name
from fsr.propose.move_memory import Made, MoveMemory
from fsr.types import Candidate, Task


class SwitchMoves:
    """Template moves; each returns a `Made` or None where it does not apply. The parsed
    template of each task is kept."""

    def __init__(self, memory: MoveMemory) -> None:
        self.memory = memory
        self._templates: dict[str, Candidate | None] = {}

    def template(self, task: Task) -> Candidate | None:
        if task.name not in self._templates:
            try:
                self._templates[task.name] = parse(task.template_source, task) if task.template_source else None
            except HeaderError:
                self._templates[task.name] = None  # a broken template: transforms and tunables only
        return self._templates[task.name]

    def instance(self, task: Task, cand: Candidate) -> bool:
        """Whether `cand` is an instance of the task's template (has exactly its switches)."""
        template = self.template(task)
        return template is not None and {t.name for t in cand.features} == {t.name for t in template.features}

    def share_on(self, request: ProposalRequest) -> float:
        """The share of switches on in the best template instance so far (else the parent)."""
        made = self.base(request.task, self.best_instance(request) or request.parents[0])
        if made is None or not made[1]:
            return 0.0
        base, current = made
        return sum(current[t.name] != off(t.values) for t in base.features) / len(base.features)

    def best_instance(self, request: ProposalRequest) -> Scored | None:
        """The task's fastest kernel so far if it is a template instance."""
        best = request.best
        if best is not None and best.ok and best.candidate.task == request.task.name \
                and self.instance(request.task, best.candidate):
            return best
        return None

    def base(self, task: Task, parent: Scored) -> tuple[Candidate, dict[str, int]] | None:
        """The parent itself if it is a template instance, else the template set to the parent's
        detected features; with the current value of each switch by catalogue name."""
        template = self.template(task)
        if template is None:
            return None
        if self.instance(task, parent.candidate):
            base = parent.candidate
        else:
            base = with_defines(template, {t.name: on(t.values) for t in template.features
                                           if feature_name(t.name) in parent.features})
        values = dict(base.resolved_defines())
        return base, {t.name: values[t.name] for t in base.features}

    def toggle(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        made = self.base(request.task, request.parents[0])
        if made is None:
            return None
        base, current = made
        by_feature = {feature_name(t.name): t for t in base.features}
        changes = {by_feature[f].name: on(by_feature[f].values, rng) for f in request.features_wanted if f in by_feature}
        changes |= {by_feature[f].name: off(by_feature[f].values) for f in request.features_unwanted if f in by_feature}
        changes = {k: v for k, v in changes.items() if current[k] != v}
        if not changes:  # nothing asked applies here: explore one switch
            switch = rng.choice(base.features)
            changes = {switch.name: off(switch.values) if current[switch.name] else on(switch.values, rng)}
        move = "toggle " + " ".join(f"{'+' if v else '-'}{k}" for k, v in sorted(changes.items()))
        return Made(with_defines(base, changes), move)

    def bold(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        """The template with several switches on: all of them on island 0 (once), else each on
        with even odds (at least two, or all there are), tunables at the template's defaults."""
        template = self.template(request.task)
        if template is None or not template.features:
            return None
        switches = template.features
        everything = Made(with_defines(template, {t.name: on(t.values) for t in switches}), "bold all switches on")
        if request.island == 0 and not self.memory.made_before(request, everything):
            return everything
        for _ in range(8):
            chosen = [t for t in switches if rng.random() < 0.5]
            least = min(2, len(switches))
            if len(chosen) < least:
                chosen += rng.sample([t for t in switches if t not in chosen], least - len(chosen))
            values = {t.name: on(t.values, rng) if t in chosen else off(t.values) for t in switches}
            made = Made(with_defines(template, values), "bold " + " ".join(f"+{t.name}" for t in chosen))
            if not self.memory.made_before(request, made):
                return made
        return None

    def stack(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        """The best template instance so far (even odds; else the parent) with one or two more
        switches on, chosen by the policy's scores and requests; requested removals go too."""
        return self._build(request, rng, adding=True)

    def prune(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        """The best template instance so far (four times in five; else the parent) with one switch off,
        the worse the policy scores it (or if it asks to remove it) the likelier."""
        return self._build(request, rng, adding=False)

    def _build(self, request: ProposalRequest, rng: random.Random, adding: bool) -> Made | None:
        best = self.best_instance(request)
        start = best if best is not None and rng.random() < (0.5 if adding else 0.8) else request.parents[0]
        made = self.base(request.task, start)
        if made is None:
            return None
        base, current = made
        pool = [t for t in base.features if (current[t.name] == off(t.values)) == adding]
        if not pool:
            return None
        scores = dict(request.feature_scores)
        wanted, unwanted = set(request.features_wanted), set(request.features_unwanted)
        sign, asked = (1, wanted) if adding else (-1, unwanted)

        def weight(name: str) -> float:
            f = feature_name(name)
            return math.exp(4 * sign * max(-1.0, min(1.0, scores.get(f, 0.0)))) * (3.0 if f in asked else 1.0)

        changes: dict[str, int] = {}
        for _ in range(1 if len(pool) == 1 or not adding or rng.random() < 0.5 else 2):
            pick = rng.choices(pool, weights=[weight(t.name) for t in pool])[0]
            pool.remove(pick)
            changes[pick.name] = on(pick.values, rng) if adding else off(pick.values)
        if adding:
            for t in base.features:
                if feature_name(t.name) in unwanted and current[t.name] != off(t.values):
                    changes[t.name] = off(t.values)
        move = ("stack " if adding else "prune ") + " ".join(f"{'+' if v else '-'}{k}"
                                                            for k, v in sorted(changes.items()))
        return Made(with_defines(base, changes), move, parent=None if start is request.parents[0] else start)

    def crossover(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        a, b = request.parents[0], request.parents[1]
        if a.id == b.id:
            return None
        made_a, made_b = self.base(request.task, a), self.base(request.task, b)
        if made_a is None or made_b is None:
            return None
        base, values_a = made_a
        values_b = made_b[1]
        mixed = {k: (values_a[k] if rng.random() < 0.5 else values_b[k]) for k in values_a}
        if mixed == values_a or mixed == values_b:
            k = rng.choice([k for k in values_a if values_a[k] != values_b[k]] or list(values_a))
            mixed[k] = values_b[k] if mixed[k] == values_a[k] else values_a[k]
        return Made(with_defines(base, mixed), f"crossover {a.id} x {b.id}", parents=2)


def on(values: tuple[int, ...], rng: random.Random | None = None) -> int:
    """A non-zero value of a switch (random among several, e.g. VEC = [0, 2, 4])."""
    nonzero = [v for v in values if v] or [1]
    return rng.choice(nonzero) if rng else nonzero[0]


def off(values: tuple[int, ...]) -> int:
    return 0 if 0 in values else values[0]
