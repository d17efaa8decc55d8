"""An island: a population of scored candidates, its own selection and proposer settings.

Islands differ on purpose (diversity weight, exploration of the feature policy, a model's
temperature), so that a campaign hedges between exploiting the best kernel and exploring
others; migration (fsr.search.migrate) carries good kernels between them.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from dataclasses import dataclass

from fsr.config import SearchConfig
from fsr.propose.base import Scored
from fsr.search import select

FAILURES_KEPT = 8  # recent failed attempts kept for correctness feedback
# Settings cycled over an island's index: island 0 exploits, later ones explore more.
DIVERSITY_WEIGHTS = (0.0, 0.1, 0.25, 0.5)
EXPLORE = (0.5, 1.0, 1.5, 2.0)
TEMPERATURE_SCALES = (0.6, 1.0, 1.2, 1.4)


@dataclass(frozen=True)
class IslandSettings:
    """What makes an island different: its seed, how much selection rewards kernels unlike the
    elites, how widely it samples the feature policy, and a multiplier on a model's temperature."""

    seed: int
    diversity_weight: float
    explore: float
    temperature_scale: float


def derive_seed(*parts: object) -> int:
    """A stable 63-bit seed from any parts (not Python's salted hash)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def settings_for(config: SearchConfig, task: str, index: int) -> IslandSettings:
    """The settings of island `index` of `task` under `config`."""
    k = index % len(EXPLORE)
    return IslandSettings(seed=derive_seed(config.seed, task, index), diversity_weight=DIVERSITY_WEIGHTS[k],
                          explore=EXPLORE[k], temperature_scale=TEMPERATURE_SCALES[k])


class Island:
    """A population with elites kept and parents chosen by tournament with a diversity term."""

    def __init__(self, index: int, settings: IslandSettings, config: SearchConfig) -> None:
        self.index = index
        self.settings = settings
        self.config = config
        self.population: list[Scored] = []  # correct, timed members, in arrival order
        self.failures: deque[Scored] = deque(maxlen=FAILURES_KEPT)
        self.requests = 0  # proposals asked of this island: numbers its request seeds
        self.evaluations = 0  # results told to it, seeds and migrants excluded

    def rng(self) -> random.Random:
        """A fresh generator for this island's next request (deterministic in its count)."""
        return random.Random(derive_seed(self.settings.seed, self.requests))

    def ask(self, rng: random.Random) -> tuple[Scored, ...]:
        """One or two parents: a tournament over the population, the second favouring kernels
        unlike the first. Empty while the island has no correct member."""
        if not self.population:
            return ()
        size, weight = self.config.tournament, self.settings.diversity_weight
        first = select.tournament(self.population, size, rng, weight,
                                  select.elites(self.population, self.config.elites))
        rest = [m for m in self.population if m.id != first.id]
        if not rest:
            return (first,)
        return first, select.tournament(rest, size, rng, max(weight, 0.1), [first])

    def tell(self, member: Scored) -> None:
        """An evaluated candidate: correct ones join the population, failures are remembered."""
        if member.ok:
            self.accept(member)
        else:
            self.failures.append(member)

    def accept(self, member: Scored) -> bool:
        """Add a correct member (a migrant is the same candidate, never a copy); False if present."""
        if not member.ok or any(m.id == member.id for m in self.population):
            return False
        self.population.append(member)
        self.population = select.trim(self.population, self.config.population, self.config.elites)
        return True

    def best(self, count: int = 1) -> list[Scored]:
        """The `count` fastest members."""
        return select.elites(self.population, count)

    def recent_failures(self, parent_ids: set[str], count: int = 3) -> tuple[Scored, ...]:
        """Recent failed children of these parents, else the island's most recent failures."""
        mine = [f for f in reversed(self.failures) if parent_ids & set(f.candidate.parents)]
        return tuple((mine or list(reversed(self.failures)))[:count])
