"""Where the Ray executor sends a candidate: the task's home worker, or another when the home is
full and someone idles, or the least loaded for a task without a home.

A worker prepares each task it is sent (inputs, references, comparators: seconds each), and keeps
what fits; sent to whichever worker is least loaded, a campaign of many tasks makes every worker
cycle through all of them. So each task has a home (`share_tasks`), whose GPU child builds it first.
"""

from __future__ import annotations

from collections.abc import Sequence

from cluster.slot import Slot

AFFINITY_CALLS = 2  # a worker that has a task prepared takes its candidates unless this much busier
HOME_GRACE_S = 30.0  # a task's home not ready this long after the first worker was: others take its work
# An idle worker takes a candidate of a task it does not hold only once it has waited this long for
# its home: preparing the task there costs seconds and may drop one of that worker's own.
STEAL_AFTER_S = 2.0


def share_tasks(tasks: Sequence[str], workers: int) -> dict[str, int]:
    """Each task's home worker: round robin in the campaign's order, so every worker holds about
    len(tasks) / workers of them and the campaign's first tasks start on every worker at once."""
    return {task: i % max(1, workers) for i, task in enumerate(dict.fromkeys(tasks))}


def place(task: str, fits: list[Slot], home: Slot | None, first_ready_at: float | None, now: float,
          waited_s: float = 0.0) -> Slot | None:
    """The open worker (`fits`) for a candidate of `task` that has waited `waited_s` (None: it waits
    on): its `home` while the home has room; else a worker with nothing to do that holds the task,
    or any such worker once the candidate has waited STEAL_AFTER_S; any worker once the home has not
    been ready for HOME_GRACE_S after the first worker was. A task without a home (or whose home
    was retired) goes to the least loaded, counting AFFINITY_CALLS for one that has it."""
    if home is None or home.retired:
        return min(fits, key=lambda s: len(s.calls) - (AFFINITY_CALLS if task in s.tasks else 0))
    if home in fits:
        return home
    idle = [s for s in fits if not s.calls and (task in s.tasks or waited_s >= STEAL_AFTER_S)]
    if idle:
        return min(idle, key=lambda s: (task not in s.tasks, s.index))
    late = home.info is None and first_ready_at is not None and now - first_ready_at > HOME_GRACE_S
    return min(fits, key=lambda s: len(s.calls)) if late else None
