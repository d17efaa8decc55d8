"""Which prepared tasks a GPU child keeps: within a byte budget, the least recently used out first.

A campaign of hundreds of tasks cannot hold every task's benchmark inputs, float64 references and
device buffers at once (three large tasks took about 5 GiB). The child keeps what fits in
`eval.prepared_max_bytes` and prepares an evicted task again when a candidate needs it; the
parent learns of evictions from the preparation's reply, so it prepares (with its long deadline)
rather than sending a candidate to a task that is gone.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def footprint(value: Any, seen: set[int] | None = None) -> int:
    """Bytes of the arrays (anything with an integer `nbytes`: NumPy, CuPy) reachable from `value`
    through dicts, lists, tuples, sets and dataclasses, each array counted once."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int) and not isinstance(value, (bytes, bytearray)):
        return nbytes
    if isinstance(value, dict):
        return sum(footprint(v, seen) for v in value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return sum(footprint(v, seen) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(footprint(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    return 0


class Resident(Generic[T]):
    """Named values within `budget_bytes` (sizes from `size`), least recently used evicted first.
    The value just added is never evicted, so a task larger than the budget still runs, alone.
    `release` is called on each evicted value (free its buffers, stop its threads)."""

    def __init__(self, budget_bytes: int, size: Callable[[T], int] = footprint,
                 release: Callable[[T], None] = lambda value: None):
        self.budget_bytes = budget_bytes
        self._size, self._release = size, release
        self._items: OrderedDict[str, tuple[T, int]] = OrderedDict()
        self._pins: Counter[str] = Counter()  # names in use elsewhere: never evicted meanwhile

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __len__(self) -> int:
        return len(self._items)

    def get(self, name: str) -> T | None:
        """The value (now the most recently used), or None if it is not held."""
        if name not in self._items:
            return None
        self._items.move_to_end(name)
        return self._items[name][0]

    def pin(self, name: str) -> None:
        """Keep `name` from eviction until as many `unpin` calls (its buffers are in use on
        another thread)."""
        self._pins[name] += 1

    def unpin(self, name: str) -> None:
        self._pins[name] -= 1
        if self._pins[name] <= 0:
            del self._pins[name]

    @property
    def held_bytes(self) -> int:
        return sum(size for _, size in self._items.values())

    def make_room(self, expected_bytes: int | None = None) -> list[str]:
        """Before preparing a new value: evict until `expected_bytes` (default: the mean size of
        those held) fits beside the rest, so the peak stays near the budget. Returns the evicted names."""
        if expected_bytes is None:
            expected_bytes = self.held_bytes // len(self._items) if self._items else 0
        return self._evict_until(self.budget_bytes - expected_bytes, keep=None)

    def add(self, name: str, value: T) -> list[str]:
        """Hold `value` under `name` (the most recently used), then evict others until within the
        budget. Returns the evicted names."""
        old = self._items.pop(name, None)
        if old is not None and old[0] is not value:
            self._release(old[0])
        self._items[name] = (value, self._size(value))
        return self._evict_until(self.budget_bytes, keep=name)

    def _evict_until(self, limit: int, keep: str | None) -> list[str]:
        evicted = []
        for name in list(self._items):
            if self.held_bytes <= limit:
                break
            if name == keep or name in self._pins:
                continue
            value, _ = self._items.pop(name)
            self._release(value)
            evicted.append(name)
        return evicted
