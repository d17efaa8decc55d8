"""Which timed runs start from a decoy, and which run each output check belongs to: the pure
bookkeeping of the timed-output check (the GPU child applies it: fsr.evaluate.gpu.timed_runs).

Every timed run starts from the state a checked launch starts from (outputs poisoned), except a
few picked at random, whose outputs start as the right answer with random elements spoiled (a
decoy). A kernel that computes everything overwrites the decoy; one that keeps what it finds in
its output (where it "already holds a number", or where a probe element agrees with the inputs)
keeps spoiled elements. After every run, outside the timed region, its outputs are compared on
the device with its input set's expected outputs, into the run's slot of a counter array read
once after timing: a mismatch in any run, decoy or not, is WRONG.

The picks come from the operating system's entropy (not fsr's seed): nothing a kernel can see
or compute tells it which runs start from a decoy.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

DECOYS = 2  # decoy runs per timing
SLOTS = 4096  # runs with a slot of their own; later ones share the last slot


@dataclass(frozen=True)
class Run:
    """One queued run: its sample index (warm-up runs count from 0 again), its input set, and
    whether it started from a decoy."""

    index: int
    input_set: int
    decoy: bool


class SamplePlan:
    """Decoy picks among the first `window` sample indices (a picked index is a decoy each time
    it comes: in the warm-up and in the timed rounds), and the ledger of queued runs."""

    def __init__(self, sets: int, window: int, decoys: int = DECOYS, picks: frozenset[int] | None = None):
        self.sets = max(sets, 1)
        self.picks = picks if picks is not None else random_picks(window, decoys)
        self.runs: list[Run] = []

    def start(self, index: int) -> tuple[int, Run]:
        """Record run `index` as queued: its counter slot and what it is."""
        run = Run(index, index % self.sets, index in self.picks)
        self.runs.append(run)
        return min(len(self.runs), SLOTS) - 1, run

    def first_wrong(self, bad: list[int]) -> tuple[Run, int, bool] | None:
        """The first run whose slot counted wrong elements (counts read back, one per slot), the
        count, and whether that slot is shared by every run from SLOTS on; None if all passed."""
        for slot, count in enumerate(bad[:min(len(self.runs), SLOTS)]):
            if count:
                return self.runs[slot], int(count), slot == SLOTS - 1 and len(self.runs) > SLOTS
        return None

    def last_per_set(self) -> dict[int, Run]:
        """Each input set's last run: its outputs are still in the set's buffers."""
        return {run.input_set: run for run in self.runs}


def random_picks(window: int, count: int) -> frozenset[int]:
    """`count` distinct indices of [0, window) (all of them if fewer), from OS entropy."""
    pool = list(range(max(window, 0)))
    picked: set[int] = set()
    while pool and len(picked) < count:
        picked.add(pool.pop(secrets.randbelow(len(pool))))
    return frozenset(picked)


def spoil_seed() -> int:
    """A fresh 63-bit seed for which elements a decoy spoils."""
    return secrets.randbits(63)


def describe(run: Run, wrong: int, total: int, shared: bool) -> str:
    """The WRONG message's opening for a mismatch found in a timed run."""
    which = f"timed run {run.index + 1} (input set {run.input_set})" if not shared else f"a timed run after the first {SLOTS}"
    how = ("; it started from a decoy: its outputs held the right answer with random elements spoiled, "
           "and a kernel that writes every element overwrites them" if run.decoy else "")
    return f"in {which}, {wrong} of {total} output elements were wrong{how}"
