"""`--plain` progress (fsr.view.LineView): a campaign of many tasks prints one short line per
update, not every task's figures; a campaign of a few tasks still names each."""

from __future__ import annotations

import io

from fsr.propose.base import BASELINE
from fsr.search.progress import Progress, TaskProgress
from fsr.view import LineView


def task(name: str, best_us: float | None, speedup: float | None, basis: str = BASELINE) -> TaskProgress:
    return TaskProgress(name, 12, 10, 24, "c1" if best_us else None, best_us, speedup, (("OK", 8), ("WRONG", 2)),
                        (), 0, speedup_basis=basis)


def progress(tasks: list[TaskProgress]) -> Progress:
    return Progress(125.0, 980, 470.4, 8, 0.91, tuple(tasks), 0, 3, 0)


def plain_line(tasks: list[TaskProgress]) -> str:
    out = io.StringIO()
    LineView(out).close(progress(tasks))
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    return lines[0]


def test_many_tasks_make_one_short_line_with_counts_and_the_best_gains() -> None:
    tasks = [task(f"level1_{i:03d}_some_long_kernelbench_name", 100.0 + i, 0.5 + i / 50, "PyTorch eager")
             for i in range(98)]
    tasks[7] = task("level1_007_unsolved", None, None, "PyTorch eager")
    line = plain_line(tasks)
    assert len(line) < 400, len(line)
    assert "evals 980" in line and "470.4/min" in line and "gpu evaluating 91%" in line
    faster = sum(t.best_speedup is not None and t.best_speedup > 1 for t in tasks)
    assert f"98 tasks: 97 with a correct kernel, {faster} faster than their reference" in line
    # the three largest gains, largest first, marked as over PyTorch eager
    assert "best gains level1_097_some_long_kernelbench_name 2.44x vs eager, level1_096" in line
    assert "level1_000" not in line and "level1_007" not in line


def test_many_tasks_none_faster_names_no_gain() -> None:
    line = plain_line([task(f"t{i}", 10.0, 0.8) for i in range(6)])
    assert "6 tasks: 6 with a correct kernel, 0 faster than their reference" in line
    assert "best gains" not in line


def test_a_few_tasks_are_each_named_with_their_figures() -> None:
    line = plain_line([task("softmax", 169.0, 28.6), task("gelu", None, None)])
    assert "softmax: 10/24 best 169.0 us (28.60x)" in line and "gelu: 10/24 best - (-)" in line
    assert "evals 980" in line
