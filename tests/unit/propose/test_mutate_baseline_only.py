"""A user's task with only a baseline: the offline search widens its launch space, tries each
generic transform, and stops the task with one line once nothing new is left."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from fsr.candidate import launch_dims, parse, with_defines
from fsr.config import SearchConfig
from fsr.propose import launch_space, transforms
from fsr.propose.mutate import MutateProposer
from fsr.search.loop import run_campaign
from fsr.tasks import load
from fsr.testing.fakes import FakeEvaluator, FakeExecutor, ListWriter, softmax_task
from fsr.types import Task

TASK_TOML = """name = "axpy"
description = "y = 2 x + 1 over a float32 vector of n elements."
sizes = ["n"]
bytes = "2 * n * 4"
flops = "2 * n"
atol = 1e-6
rtol = 1e-6
test_sizes = [{ n = 1 }, { n = 1000 }, { n = 4099 }]
bench_size = { n = 16777216 }

[[args]]
name = "x"
dtype = "float32"
shape = ["n"]
intent = "in"

[[args]]
name = "y"
dtype = "float32"
shape = ["n"]
intent = "out"
"""
REFERENCE = """import numpy as np


def make_inputs(sizes, rng):
    return {"x": rng.standard_normal(sizes["n"], dtype=np.float32)}


def reference(inputs, sizes):
    return {"y": 2.0 * inputs["x"].astype(np.float64) + 1.0}
"""
HEADER = """/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "axpy"
grid = ["cdiv(n, BLOCK)"]
block = ["BLOCK"]
args = ["x", "y", "n"]
*/
"""
ONE_PER_THREAD = """extern "C" __global__ void axpy(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
"""
GRID_STRIDE = """extern "C" __global__ void axpy(const float* x, float* y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = 2.0f * x[i] + 1.0f;
}
"""


def make_task(root: Path, baseline: str, name: str = "axpy") -> Task:
    """A task folder with a baseline and no template, as a user would write one."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "task.toml").write_text(TASK_TOML.replace('name = "axpy"', f'name = "{name}"'))
    (folder / "reference.py").write_text(REFERENCE)
    (folder / "baseline.cu").write_text(baseline)
    return load(name, root)


def rewrites(task: Task) -> dict[str, Task]:
    cand = parse(task.baseline_source, task)
    return {move: parse(text, task) for text, move in launch_space.rewrites(cand, task)}


# ---- the launch space ---------------------------------------------------------------------------

def test_a_single_block_size_is_widened_to_every_warp_multiple_power_of_two(tmp_path):
    (move, cand), = rewrites(make_task(tmp_path, HEADER + ONE_PER_THREAD)).items()
    assert cand.tunables[0].values == (256, 32, 64, 128, 512, 1024)  # the declared default stays first
    assert move == "launch BLOCK in [256, 32, 64, 128, 512, 1024]"


def test_a_two_dimensional_block_keeps_between_a_warp_and_1024_threads():
    task = load("sgemm")
    by_move = {m: c for m, c in rewrites(task).items()}
    bx = next(c for m, c in by_move.items() if m.startswith("launch BX"))
    values = dict((t.name, t.values) for t in bx.tunables)["BX"]
    assert sorted(values) == [2, 4, 8, 16, 32, 64]  # BY stays 16: 2 x 16 = 32 ... 64 x 16 = 1024


def test_a_tunable_that_divides_only_the_grid_is_widened_as_work_per_thread(tmp_path):
    text = HEADER.replace("BLOCK = [256]", "BLOCK = [256]\nITEMS = [4]").replace(
        "cdiv(n, BLOCK)", "cdiv(n, BLOCK * ITEMS)")
    task = make_task(tmp_path, text + GRID_STRIDE)
    items = next(c for m, c in rewrites(task).items() if m.startswith("launch ITEMS"))
    assert dict((t.name, t.values) for t in items.tunables)["ITEMS"] == (4, 2, 8)  # halved and doubled
    assert "launch ITEMS in [4, 2, 8, 1, 16]" in {m for _, m in launch_space.rewrites(items, task)}
    while True:  # widened again and again, until the grid at the benchmark size would be too small
        wider = [parse(t, task) for t, m in launch_space.rewrites(items, task) if m.startswith("launch ITEMS")]
        if not wider:
            break
        items = wider[0]
    values = dict((t.name, t.values) for t in items.tunables)["ITEMS"]
    assert min(values) == 1 and max(values) == 2**24 // 256 // launch_space.MIN_BLOCKS
    assert launch_dims(with_defines(items, {"ITEMS": max(values)}), dict(task.bench_size))[0][0] == (256,)


def test_a_grid_stride_kernel_gets_a_work_per_thread_divisor_and_a_one_per_thread_kernel_does_not(tmp_path):
    strided = rewrites(make_task(tmp_path / "a", HEADER + GRID_STRIDE))
    cand = strided["launch WORK_PER_THREAD in [1, 2, 4, 8, 16]"]
    assert cand.launches[0].grid == ("cdiv(cdiv(n, BLOCK), WORK_PER_THREAD)",)
    plain = rewrites(make_task(tmp_path / "b", HEADER + ONE_PER_THREAD))
    assert not any("WORK_PER_THREAD" in m for m in plain)


def test_a_literal_block_size_becomes_a_tunable_unless_the_code_repeats_it(tmp_path):
    literal = HEADER.replace("[tunables]\nBLOCK = [256]\n", "").replace("BLOCK", "256")
    (move, cand), = rewrites(make_task(tmp_path / "a", literal + ONE_PER_THREAD)).items()
    assert move.endswith("(was 256)") and cand.launches[0].block == ("BLOCK",)
    assert cand.launches[0].grid == ("cdiv(n, BLOCK)",)
    hard_coded = ONE_PER_THREAD.replace("int i =", "__shared__ float s[256];\n    int i =")
    assert rewrites(make_task(tmp_path / "b", literal + hard_coded)) == {}


def test_ldg_leaves_a_name_that_another_kernel_writes():
    task = softmax_task(None)
    two = parse(task.baseline_source, task)
    source = two.source + ("\n__global__ void other(const float* y, float* x) { x[0] = y[0]; }\n"
                           "__global__ void third(float* y) { y[1] += 1.0f; }\n")
    text, _ = transforms.use_ldg(parse(source, task), task, random.Random(0))
    assert "__ldg(&xr[c])" in text and "__ldg(&y[" not in text and "__ldg(&x[" not in text


# ---- the search ---------------------------------------------------------------------------------

class RecordingView:
    def __init__(self) -> None:
        self.notes: list[str] = []

    def update(self, progress) -> None:
        pass

    def close(self, progress) -> None:
        pass

    def note(self, text: str) -> None:
        self.notes.append(text)


def search(tasks: list[Task], evaluator: FakeEvaluator, max_evaluations: int = 400):
    """A campaign's summary, rows and the view's notes (no wait for comparators at its end: the
    fake evaluator times none, and these tests read the search's own notes)."""
    writer, view = ListWriter(), RecordingView()
    summary = run_campaign(tasks, FakeExecutor(evaluator), MutateProposer(),
                           SearchConfig(max_evaluations=max_evaluations, seed=1, comparators_wait_s=0), writer, view)
    return summary, writer.rows, view.notes


def test_a_baseline_only_task_searches_its_launch_space_and_every_transform(tmp_path):
    task = make_task(tmp_path, HEADER + GRID_STRIDE)
    faster = FakeEvaluator(noise=0.0, define_effects={("BLOCK", 512): 1.5, ("WORK_PER_THREAD", 8): 2.0})
    summary, rows, notes = search([task], faster, max_evaluations=200)
    defines = [dict(c.resolved_defines()) for c, _, _ in rows]
    assert {d["BLOCK"] for d in defines} == {32, 64, 128, 256, 512, 1024}
    assert {1, 2, 4, 8, 16, 32} <= {d.get("WORK_PER_THREAD", 1) for d in defines}  # the first list, then wider
    moves = {c.origin.move.split()[0] for c, _, _ in rows}
    assert {"restrict", "ldg", "launch_bounds", "launch", "tunable"} <= moves
    (best,) = summary.tasks
    assert best.best_speedup == pytest.approx(3.0)  # both effects found together
    assert summary.stopped_by == "evaluations" and notes == []  # still going at the budget


def test_a_baseline_only_task_with_nothing_new_left_stops_with_one_line(tmp_path):
    task = make_task(tmp_path, HEADER + ONE_PER_THREAD)  # no gridDim: block sizes and transforms only
    summary, rows, notes = search([task], FakeEvaluator(noise=0.0, define_effects={("BLOCK", 512): 1.25}))
    (best,) = summary.tasks
    assert summary.stopped_by == "exhausted" and best.finished < 400
    assert best.best_speedup == pytest.approx(1.25)
    kernels = {(c.source.split("*/")[1], c.resolved_defines(), frozenset(c.tunables[0].values)) for c, _, _ in rows}
    assert len(kernels) == len(rows)  # a kernel and its tuning space evaluated once, whatever the values' order
    (line,) = notes
    assert line.startswith(f"axpy: nothing new to try after {best.finished} evaluations (best 1.25x")
    assert "tunables" in line and "template.cu" in line and "--model" in line
    assert best.note == line


def test_an_exhausted_task_does_not_stop_the_others(tmp_path):
    small = make_task(tmp_path, HEADER + ONE_PER_THREAD)
    summary, rows, notes = search([small, softmax_task()], FakeEvaluator(), max_evaluations=120)
    finished = {t.task: t.finished for t in summary.tasks}
    assert finished["softmax"] == 120 and finished["axpy"] < 120
    assert len(notes) == 1 and notes[0].startswith("axpy: ")
    assert summary.stopped_by == "evaluations, exhausted"


def test_the_hint_names_only_what_the_task_lacks(tmp_path):
    proposer = MutateProposer()
    bare = proposer.describe(make_task(tmp_path, HEADER + ONE_PER_THREAD)).exhausted_hint
    assert "tunables" in bare and "template.cu" in bare and bare.endswith("or a language model (--model)")
    assert proposer.describe(load("softmax")).exhausted_hint == "a language model (--model)"


def test_both_views_print_the_line_once_as_it_comes(tmp_path):
    import io

    from fsr.view import LineView, LiveView

    task = make_task(tmp_path, HEADER + ONE_PER_THREAD)
    for make in (lambda s: LineView(s, every=1000), LiveView):
        stream = io.StringIO()
        view = make(stream)
        run_campaign([task], FakeExecutor(FakeEvaluator()), MutateProposer(), SearchConfig(max_evaluations=400),
                     None, view)
        lines = [line for line in stream.getvalue().splitlines() if "nothing new to try" in line]
        assert len(lines) == 1 and lines[0].startswith("fsr: axpy: nothing new to try after"), lines
