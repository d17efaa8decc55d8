"""Parent selection and population upkeep: pure functions over scored members.

Fitness is log(best_us / member_us): 0 for the best, negative for slower ones, so a diversity
bonus in [0, 1] (mean Jaccard distance of detected feature sets) weighs against a slowdown on
the same scale (a weight of 0.1 trades a 10% slower parent for a maximally different one).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from fsr.propose.base import Scored
from fsr.propose.features import jaccard_distance


def fitness(member: Scored, best_us: float) -> float:
    """log(best_us / latency); -inf for a failed member."""
    lat = member.latency_us
    return math.log(best_us / lat) if math.isfinite(lat) and lat > 0 else -math.inf


def diversity(member: Scored, others: Sequence[Scored]) -> float:
    """Mean Jaccard distance of the member's features to the others' (itself excluded); 0 alone."""
    rest = [o for o in others if o.id != member.id]
    if not rest:
        return 0.0
    return sum(jaccard_distance(member.features, o.features) for o in rest) / len(rest)


def tournament(members: Sequence[Scored], size: int, rng: random.Random, diversity_weight: float = 0.0,
               reference: Sequence[Scored] = ()) -> Scored:
    """The best of `size` members drawn without replacement, scored by fitness plus
    `diversity_weight` times their diversity from `reference` (e.g. the elites, or a first
    parent). Ties go to the earlier-drawn member, so the choice depends only on the rng."""
    if not members:
        raise ValueError("tournament over an empty population")
    drawn = rng.sample(list(members), min(size, len(members)))
    best_us = min(m.latency_us for m in members)
    best_us = best_us if math.isfinite(best_us) else 1.0

    def score(m: Scored) -> float:
        bonus = diversity_weight * diversity(m, reference) if diversity_weight and reference else 0.0
        return fitness(m, best_us) + bonus

    return max(drawn, key=score)


def elites(members: Sequence[Scored], count: int) -> list[Scored]:
    """The `count` fastest members (ties by position, oldest first)."""
    return sorted(members, key=lambda m: m.latency_us)[:count]


def trim(members: list[Scored], population: int, elite_count: int) -> list[Scored]:
    """Cap the population: the elites always stay; otherwise the oldest members leave first
    (regularised evolution, Real et al. 2019: ageing keeps a population from collapsing onto one
    lineage while the elites keep the best). `members` is in arrival order."""
    keep = {m.id for m in elites(members, elite_count)}
    out = list(members)
    i = 0
    while len(out) > population and i < len(out):
        if out[i].id in keep:
            i += 1
        else:
            del out[i]
    return out
