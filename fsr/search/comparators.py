"""The comparators a campaign's table needs, asked for after its last evaluation.

A worker times a task's comparators (the library, PyTorch eager, torch.compile) beside its first
candidates, and their figures reach the lineage on the evaluations that follow. A campaign that
ends soon after a task started (a short wall budget over many tasks) can end before they came
back: its table would show no comparator for that task. So a campaign that ends by itself (its
budgets, a target reached, nothing left to try; never a user's stop) asks the executor for the
comparators of every task that no evaluation carried, once the evaluations in flight are done,
and waits `search.comparators_wait_s` at most. The answer is no evaluation: run.json keeps the
figures (fsr.run_json.record_comparators), where `fsr bench` and `fsr report` read them beside
the lineage's (fsr.report.comparators.with_recorded), and the summary says what came back and
what was left, and why.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fsr.execute.base import Executor
from fsr.types import Comparison, Evaluation

COLUMNS = ("library_us", "torch_us", "torch_compile_us")  # a task's comparators, as the lineage names them
STOPPED = "the wait was stopped (Ctrl-C)"
NAMED = 6  # tasks named in the summary's line; the rest are counted


class Noted(Protocol):
    def note(self, text: str) -> None: ...


@dataclass(frozen=True)
class ComparatorWait:
    """What a campaign's wait for its comparators brought: the bound, the seconds it took and
    each task's answer (Comparison)."""

    bound_s: float
    spent_s: float
    answers: tuple[Comparison, ...]

    @property
    def timed(self) -> list[str]:
        """The tasks whose figures came back."""
        return [c.task for c in self.answers if c.figures and not c.left]

    @property
    def left(self) -> dict[str, str]:
        """Task -> why none came back (the bound ran out, fsr's own fault, a stop)."""
        return {c.task: c.left for c in self.answers if c.left}

    @property
    def none(self) -> list[str]:
        """The tasks answered with no figure: they have no comparator, or each failed (the
        worker's log says why)."""
        return [c.task for c in self.answers if not c.figures and not c.left]

    def text(self) -> str:
        """One line for the campaign's summary ("" when none came back and none was left: the
        tasks asked for have no comparator)."""
        if not self.timed and not self.left:
            return ""
        count = len(self.answers)
        line = (f"comparators of {count} task{'s' * (count != 1)} asked for after the last evaluation (at most "
                f"{self.bound_s:.0f} s): {len(self.timed)} came back in {self.spent_s:.0f} s")
        if self.none:
            line += f"; none timed for {_named(self.none)} (no comparator, or each failed)"
        reasons: dict[str, list[str]] = {}
        for task, why in self.left.items():
            reasons.setdefault(why, []).append(task)
        if reasons:
            line += "; left: " + "; ".join(f"{_named(tasks)} ({why})" for why, tasks in reasons.items())
        return line

    def record(self) -> dict[str, Any]:
        """run.json's account of it, in the campaign's entry."""
        return {"asked": len(self.answers), "timed": self.timed, "left": self.left,
                "bound_s": self.bound_s, "spent_s": round(self.spent_s, 3)}


def _named(tasks: list[str]) -> str:
    shown = ", ".join(tasks[:NAMED])
    return shown + (f" and {len(tasks) - NAMED} more" if len(tasks) > NAMED else "")


def carries(ev: Evaluation) -> bool:
    """Whether an evaluation carries any comparator figure of its task."""
    return any(getattr(ev, c) is not None for c in COLUMNS)


def carried_in(rows: Iterable[dict[str, Any]]) -> set[str]:
    """The tasks some lineage row (or run.json comparators entry) carries a comparator figure for."""
    return {str(r["task"]) for r in rows if any(r.get(c) is not None for c in COLUMNS)}


def time_untimed(executor: Executor, tasks: Sequence[str], bound_s: float, view: Noted | None) -> ComparatorWait:
    """Ask `executor` for the comparators of `tasks`, within `bound_s`. A Ctrl-C during the wait
    ends the wait (the tasks are left, saying so) and the campaign's summary is written; a
    failure of the executor's machinery leaves them with the reason: neither is a verdict."""
    if view is not None:
        view.note(f"timing the comparators of {len(tasks)} task{'s' * (len(tasks) != 1)} that no evaluation "
                  f"carried, before the table (at most {bound_s:.0f} s)")
    started = time.perf_counter()
    try:
        answers = executor.compare(tasks, bound_s)
    except KeyboardInterrupt:
        answers = [Comparison(t, left=STOPPED) for t in tasks]
    except Exception as e:  # fsr's own machinery (every worker lost): no figures, and no verdict
        why = f"fsr's own fault: {' '.join(str(e).split())[:300]}"
        answers = [Comparison(t, left=why) for t in tasks]
    return ComparatorWait(bound_s, time.perf_counter() - started, tuple(answers))
