"""The process trees an embedded Ray leaves behind, and stopping them (Linux: read from /proc).

Ray's agents (dashboard agent, runtime-env agent) are children of the raylet. When a start is
interrupted, ray.shutdown may stop the raylet before it stops them; orphaned, they run on for
minutes until they notice. Taking the whole tree while it is still whole, then stopping every
process in it, ends them at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable

GRACE_S = 2.0


def children(pid: int) -> set[int]:
    """The direct children of `pid` (empty where /proc cannot be read)."""
    return {p for p, parent in _parents().items() if parent == pid}


def tree(roots: Iterable[int]) -> set[int]:
    """`roots` and all their descendants that are alive now."""
    parents = _parents()
    found = {r for r in roots if r in parents}
    grew = True
    while grew:
        more = {p for p, parent in parents.items() if parent in found and p not in found}
        found |= more
        grew = bool(more)
    return found


def stop(pids: Iterable[int], grace_s: float = GRACE_S) -> None:
    """SIGTERM to each of `pids`, SIGKILL to those still there after `grace_s`."""
    pids = set(pids)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        pids &= set(_parents())
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live (not zombie) process."""
    out = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # the name may hold spaces and ')'
        except (OSError, IndexError):
            continue
        if fields and fields[0] != b"Z":
            out[int(entry)] = int(fields[1])
    return out
