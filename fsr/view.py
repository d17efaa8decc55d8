"""Progress views for `fsr run`: a rich live table on a terminal, plain lines elsewhere.

Both are fed `fsr.search.progress.Progress` snapshots by the search loop (`update` after each
batch of results, `close` once at the end) and never touch the search state themselves.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import TYPE_CHECKING, Any, TextIO

from fsr.certification import shortcut_words
from fsr.propose.base import BASELINE
from fsr.search.progress import Progress, TaskProgress

if TYPE_CHECKING:
    from rich.console import Group


def latency_text(value: float | None, missing: str = "-") -> str:
    """A latency in microseconds as `123.4 us` or, from a millisecond up, `1.234 ms`."""
    if value is None:
        return missing
    return f"{value / 1000:.3f} ms" if value >= 1000 else f"{value:.1f} us"


def speedup_text(value: float | None, missing: str = "-") -> str:
    return missing if value is None else f"{value:.2f}x"


def _speedup(task: TaskProgress) -> str:
    """The best speedup, marked where it is over PyTorch eager (a task without baseline.cu)."""
    vs = "" if task.speedup_basis == BASELINE or task.best_speedup is None else " vs eager"
    return speedup_text(task.best_speedup) + vs


def verdicts_text(task: TaskProgress) -> str:
    """A task's verdict counts, then (where any) its certifications, the failed ones with why
    ("UNCERTIFIED=3 (timing 2, stress set logits 1)"), and its screenings cut short or answered
    from an earlier judgement; a count that is zero is not named."""
    failed = sum(n for _, n in task.uncertified)
    certified = f" certified={task.certified}" if task.certified or failed else ""
    if failed:
        certified += f" UNCERTIFIED={failed} ({failed_checks_text(task.uncertified)})"
    shortcuts = shortcut_words(task.cut_short, task.answered_from)
    return (" ".join(f"{v}={n}" for v, n in task.verdicts) or "-") + certified + (f"; {shortcuts}" if shortcuts else "")


def check_kind(check: str) -> str:
    """A failed check without the size or set it failed at: "stress set logits at rows=129"
    reads "stress set logits" and "allocation slack (fresh inputs at rows=7)" "allocation
    slack", so the failures of one check at several sizes are counted together."""
    return check.split(" (", 1)[0].split(" at ", 1)[0]


def failed_checks_text(uncertified: tuple[tuple[str, int], ...]) -> str:
    """Failed certifications by the kind of check that failed, most first: "timing 2, fresh inputs 1"."""
    kinds: Counter[str] = Counter()
    for check, n in uncertified:
        kinds[check_kind(check)] += n
    return ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items(), key=lambda kn: (-kn[1], kn[0])))


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"


def headline(p: Progress) -> str:
    """One line: elapsed, evaluations, rate, in flight, GPU busy fraction (when known)."""
    busy = f"  gpu evaluating {p.busy_fraction:.0%}" if p.busy_fraction is not None else ""
    extra = f"  dup {p.duplicates_dropped}  invalid {p.proposals_dropped}"
    if p.proposer_errors:
        extra += f"  proposer errors {p.proposer_errors}"
    if p.certifications or p.certifying:
        failed = f" ({p.uncertified} failed)" if p.uncertified else ""
        extra += f"  certified {p.certifications - p.uncertified}{failed}  certifying {p.certifying}"
    return (f"{_clock(p.elapsed_s)}  evals {p.evaluations}  {p.evaluations_per_min:.1f}/min  "
            f"in flight {p.in_flight}{busy}{extra}")


def pace_line(p: Progress) -> str | None:
    """The model's side of the pace, when a model proposes: its latency, the requests in flight
    (and how many the pace aims at), proposals waiting for a worker, workers waiting for a
    proposal (the side that waits is the side that is faster), 429s met."""
    pace = p.pace
    if pace is None:
        return None
    latency = "-" if pace.latency_p50_s is None else f"{pace.latency_p50_s:.1f} s (p90 {pace.latency_p90_s or 0:.1f} s)"
    throttled = f"  429s {pace.throttled}" if pace.throttled else ""
    return (f"model latency {latency}  requests in flight {pace.requests_in_flight}/{pace.target_in_flight}  "
            f"proposals waiting {pace.proposals_waiting}  workers waiting {pace.workers_waiting}{throttled}")


class LineView:
    """Plain progress for logs and pipes: one line every `every` evaluations, plus the end."""

    def __init__(self, stream: TextIO | None = None, every: int = 10) -> None:
        self.stream = stream or sys.stdout
        self.every = max(1, every)
        self._printed = 0

    def update(self, progress: Progress) -> None:
        if progress.evaluations >= self._printed + self.every:
            self._printed = progress.evaluations - progress.evaluations % self.every
            self._write(progress)

    def close(self, progress: Progress) -> None:
        self._write(progress)

    def note(self, text: str) -> None:
        """One line of news from the search (a task that stopped early, and why)."""
        print(f"fsr: {text}", file=self.stream, flush=True)

    def _write(self, p: Progress) -> None:
        tasks = task_words(p.tasks)
        pace = pace_line(p)
        print(f"{headline(p)}  |  {tasks}" + (f"  |  {pace}" if pace else ""), file=self.stream, flush=True)


EACH_TASK_UP_TO = 4  # tasks named one by one on a plain line; more get one short summary
GAINS_SHOWN = 3


def task_words(tasks: tuple[TaskProgress, ...]) -> str:
    """The tasks' part of a plain line: each task's evaluations, best and speedup for a few
    tasks; for more, how many have a correct kernel and beat their reference (the baseline, or
    PyTorch eager for a task without one) and the best few gains, so a campaign of 98 tasks still
    prints one short line (each task's detail is in the live view and the report)."""
    if len(tasks) <= EACH_TASK_UP_TO:
        return "  ".join(f"{t.task}: {t.finished}/{t.budget} best {latency_text(t.best_us)} ({_speedup(t)})"
                         for t in tasks)
    correct = sum(t.best_us is not None for t in tasks)
    faster = [t for t in tasks if t.best_speedup is not None and t.best_speedup > 1.0]
    gains = sorted(faster, key=lambda t: -(t.best_speedup or 0.0))[:GAINS_SHOWN]
    best = f"; best gains {', '.join(f'{t.task} {_speedup(t)}' for t in gains)}" if gains else ""
    return f"{len(tasks)} tasks: {correct} with a correct kernel, {len(faster)} faster than their reference{best}"


class LiveView:
    """A rich live table: per task and per island, best latency and speedup, verdict counts.
    `update` only keeps the snapshot; rich's refresh thread renders the latest one."""

    def __init__(self, stream: TextIO | None = None, refresh_per_s: float = 4.0) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        self.console = Console(file=stream or sys.stdout)
        self._latest: Progress | None = None
        self.live: Any = Live(console=self.console, refresh_per_second=refresh_per_s, transient=False,
                              get_renderable=lambda: self.render(self._latest) if self._latest else Text("starting"))
        self.live.start()

    def update(self, progress: Progress) -> None:
        self._latest = progress

    def close(self, progress: Progress) -> None:
        self._latest = progress
        self.live.refresh()
        self.live.stop()

    def note(self, text: str) -> None:
        """One line of news, printed above the live table."""
        self.console.print(f"fsr: {text}", markup=False, highlight=False)

    @staticmethod
    def render(p: Progress) -> Group:
        """The headline and table of one snapshot (a method of its own, to test without a TTY)."""
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(expand=False)
        for name in ("task", "island", "evals", "pop", "best", "speedup", "verdicts"):
            table.add_column(name, justify="left" if name in ("task", "verdicts") else "right")
        for t in p.tasks:
            table.add_row(f"[bold]{t.task}[/]", "all", f"{t.finished}/{t.budget}", "",
                          latency_text(t.best_us), _speedup(t), verdicts_text(t))
            for i in t.islands:
                table.add_row("", str(i.index), str(i.evaluations), str(i.population), latency_text(i.best_us),
                              speedup_text(i.best_speedup), "")
        pace = pace_line(p)
        return Group(Text(headline(p), style="bold"), *([Text(pace)] if pace else []), table)


def make_view(stream: TextIO | None = None, every: int = 10, live: bool | None = None) -> LiveView | LineView:
    """A live table on a terminal, plain lines otherwise (`live` forces either)."""
    stream = stream or sys.stdout
    if live is None:
        live = stream.isatty()
    return LiveView(stream) if live else LineView(stream, every)
