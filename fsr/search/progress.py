"""Progress snapshots: frozen records the loop hands to a view, and the summary it returns."""

from __future__ import annotations

from dataclasses import dataclass

from fsr.propose.base import BASELINE, task_speedup
from fsr.search.comparators import ComparatorWait
from fsr.search.pace import PaceStats
from fsr.search.state import CampaignState, TaskState


@dataclass(frozen=True)
class IslandProgress:
    index: int
    population: int
    evaluations: int  # its own children's results (seeds and migrants excluded)
    best_us: float | None
    best_speedup: float | None


@dataclass(frozen=True)
class TaskProgress:
    task: str
    submitted: int
    finished: int
    budget: int
    best_id: str | None
    best_us: float | None
    best_speedup: float | None  # over `speedup_basis`, as timed on the same worker
    verdicts: tuple[tuple[str, int], ...]
    islands: tuple[IslandProgress, ...]
    migrations: int
    note: str = ""  # why it stopped before its budgets, when it did
    speedup_basis: str = BASELINE  # or PyTorch eager, for a task without baseline.cu
    certified: int = 0  # certifications passed
    uncertified: tuple[tuple[str, int], ...] = ()  # failed ones, by the set or check that failed
    cut_short: int = 0  # screenings whose timing stopped early, clearly slower than the best
    answered_from: int = 0  # screenings answered from an earlier judgement of the same program


@dataclass(frozen=True)
class Progress:
    """The campaign at one instant. `busy_fraction` is the executor's, when it reports one."""

    elapsed_s: float
    evaluations: int  # finished in this run (resumed rows excluded)
    evaluations_per_min: float
    in_flight: int
    busy_fraction: float | None
    tasks: tuple[TaskProgress, ...]
    proposals_dropped: int
    duplicates_dropped: int
    proposer_errors: int
    pace: PaceStats | None = None  # a paced (model) proposer's: latency, requests, who waits for whom
    certifications: int = 0  # finished in this run (not evaluations)
    uncertified: int = 0  # of them, failed
    certifying: int = 0  # certification requests queued or running now


@dataclass(frozen=True)
class CampaignSummary:
    """What `run_campaign` returns. `driver_s` is the loop's own time (wall time less time
    blocked in `Executor.poll`), the figure to keep small when many GPUs are fed."""

    progress: Progress
    resumed: int  # lineage rows replayed before the run
    wall_s: float
    driver_s: float
    stopped_by: str  # "evaluations", "wall time", "target speedup", "exhausted", or several
    comparators: ComparatorWait | None = None  # the comparators asked for after the last evaluation

    @property
    def evaluations(self) -> int:
        return self.progress.evaluations

    @property
    def driver_ms_per_evaluation(self) -> float:
        return 1000 * self.driver_s / max(1, self.evaluations)

    @property
    def tasks(self) -> tuple[TaskProgress, ...]:
        return self.progress.tasks


def task_progress(ts: TaskState, budget: int) -> TaskProgress:
    best = ts.best
    islands = tuple(IslandProgress(i.index, len(i.population), i.evaluations,
                                   b[0].latency_us if (b := i.best()) else None,
                                   task_speedup(ts.task, b[0].evaluation) if b else None)
                    for i in ts.islands)
    return TaskProgress(ts.task.name, ts.submitted, ts.finished, budget, best.id if best else None,
                        best.latency_us if best else None, ts.best_speedup,
                        tuple(sorted(ts.verdicts.items())), islands, len(ts.migrations), ts.note, ts.speedup_basis,
                        ts.certified, tuple(sorted(ts.uncertified.items())), ts.cut_short, ts.answered_from)


def snapshot(state: CampaignState, elapsed_s: float, evaluations: int, in_flight: int,
             busy_fraction: float | None, counts: dict[str, int], pace: PaceStats | None = None,
             certifying: int = 0) -> Progress:
    """A Progress record of the state now (`in_flight` counts certifications too)."""
    rate = 60.0 * evaluations / elapsed_s if elapsed_s > 0 else 0.0
    tasks = tuple(task_progress(ts, state.config.max_evaluations) for ts in state.tasks.values())
    return Progress(elapsed_s, evaluations, rate, in_flight, busy_fraction, tasks,
                    counts.get("dropped", 0), counts.get("duplicates", 0), counts.get("errors", 0), pace,
                    counts.get("certifications", 0), counts.get("uncertified", 0), certifying)
