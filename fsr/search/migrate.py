"""Migration on a ring: each island sends its best few to the next one.

A migrant is the same `Scored` member, hence the same candidate id: nothing is copied, nothing
is re-evaluated, and the lineage never holds two rows for one kernel because of migration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fsr.search.island import Island


@dataclass(frozen=True)
class Migration:
    """One member moved: from island, to island, candidate id."""

    source: int
    target: int
    candidate_id: str


def migrate(islands: Sequence[Island], count: int) -> list[Migration]:
    """Send each island's `count` best to the next island on the ring (all chosen before any is
    moved, so a migrant travels one hop per round); returns what actually moved."""
    if len(islands) < 2 or count < 1:
        return []
    outgoing = [island.best(count) for island in islands]
    moved = []
    for i, members in enumerate(outgoing):
        target = islands[(i + 1) % len(islands)]
        for member in members:
            if target.accept(member):
                moved.append(Migration(islands[i].index, target.index, member.id))
    return moved
