"""The PyTorch-eager comparator's record: on the Evaluation, in the lineage (older lineages without
the column still read), in `fsr eval --json`, and defined by the built-in tasks."""

from __future__ import annotations

import inspect
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fsr import lineage, tasks
from fsr.commands.eval import to_json
from fsr.types import Candidate, Evaluation, LaunchSpec, Timing, Verdict


def candidate(i: int = 0) -> Candidate:
    return Candidate(task="softmax", source=f"__global__ void k{i}(float* y) {{}}",
                     launches=(LaunchSpec(f"k{i}", ("rows",), (256,), ("y",)),))


def evaluation(c: Candidate, torch_us: float | None) -> Evaluation:
    timing = Timing(10.0, 9.5, 11.0, 9.0, (10.0, 9.5, 11.0, 9.0), 800.0, 0.0, 0.3)
    return Evaluation(c.id, c.task, Verdict.OK, timing=timing, baseline_us=40.0, library_us=20.0,
                      torch_us=torch_us)


def test_torch_time_round_trips_through_the_lineage(tmp_path: Path) -> None:
    with lineage.LineageWriter(tmp_path) as w:
        for i, us in enumerate((15.0, None)):
            c = candidate(i)
            w.append(c, replace(evaluation(c, us), worker="gpu0"))
    rows = lineage.read(tmp_path).to_pylist()
    assert [r["torch_us"] for r in rows] == [15.0, None]
    assert [lineage.evaluation_from_row(r).torch_us for r in rows] == [15.0, None]


def test_torch_compile_time_and_its_compile_seconds_round_trip(tmp_path: Path) -> None:
    c = candidate()
    ev = replace(evaluation(c, 15.0), torch_compile_us=12.0, torch_compile_s=31.5, worker="gpu0")
    with lineage.LineageWriter(tmp_path) as w:
        w.append(c, ev)
    (row,) = lineage.read(tmp_path).to_pylist()
    assert (row["torch_compile_us"], row["torch_compile_s"]) == (12.0, 31.5)
    assert lineage.evaluation_from_row(row) == ev
    data = to_json(ev, [1.0])
    assert data["vs_torch_compile"] == pytest.approx(1.2) and data["torch_compile_s"] == 31.5
    assert to_json(evaluation(c, 15.0), [1.0])["vs_torch_compile"] is None


def test_lineage_written_before_the_torch_column_reads_with_nulls(tmp_path: Path) -> None:
    c = candidate()
    with lineage.LineageWriter(tmp_path) as w:
        w.append(c, replace(evaluation(c, 15.0), worker="gpu0"))
    for f in (tmp_path / "evaluations").glob("part-*.parquet"):
        pq.write_table(pq.read_table(f).drop_columns(["torch_us", "torch_compile_us", "torch_compile_s"]), f)
    row = lineage.read(tmp_path).to_pylist()[0]
    assert row["torch_us"] is None and row["library_us"] == 20.0 and row["torch_compile_us"] is None
    assert lineage.evaluation_from_row(row).torch_us is None


def test_eval_json_gives_speedups_over_torch_and_library() -> None:
    c = candidate()
    data = to_json(evaluation(c, 15.0), [1.0])
    assert data["torch_us"] == 15.0
    assert data["vs_torch"] == pytest.approx(1.5) and data["vs_library"] == pytest.approx(2.0)
    missing = to_json(evaluation(c, None), [1.0])
    assert missing["torch_us"] is None and missing["vs_torch"] is None
    untimed = to_json(replace(evaluation(c, 15.0), verdict=Verdict.WRONG, timing=None), [1.0])
    assert untimed["vs_torch"] is None


@pytest.mark.parametrize("name", ["softmax", "layernorm", "sgemm"])
def test_built_in_tasks_define_a_torch_eager_comparator(name: str) -> None:
    fn = getattr(tasks.functions(tasks.load(name)), "torch_eager", None)
    assert fn is not None and list(inspect.signature(fn).parameters) == ["inputs", "sizes"]
