"""On a real GPU: a campaign that ends before its task's comparators came back with an evaluation
has them timed before its table (Executor.compare through the local executor and the GPU
evaluator), and `fsr bench`'s rows read them. Kept short: one evaluation, no tuning, torch.compile
off (PyTorch eager and the library are timed as ever)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from fsr import config as cfg_mod
from fsr import lineage, run_json, tasks
from fsr.commands import bench
from fsr.config import Config, EvalConfig, SearchConfig, TuneConfig
from fsr.execute.base import Workers
from fsr.execute.local import LocalExecutor
from fsr.propose.mutate import MutateProposer
from fsr.report.comparators import with_recorded
from fsr.search.loop import run_campaign
from fsr.types import Candidate, Comparison, Evaluation, WorkerSpec
from tests.support.xdist_gpus import shared_budget

pytestmark = pytest.mark.gpu


class Late:
    """The local executor with its evaluations' comparator figures withheld: whatever the GPU
    child's comparator thread managed beside the one evaluation, the campaign ends as one whose
    comparators had not come back (deterministically, however fast this GPU and host are)."""

    def __init__(self, inner: LocalExecutor) -> None:
        self.inner = inner

    def free_slots(self) -> int:
        return self.inner.free_slots()

    def submit(self, candidate: Candidate) -> None:
        self.inner.submit(candidate)

    def poll(self, timeout_s: float) -> list[Evaluation]:
        return [replace(ev, library_us=None, torch_us=None, torch_compile_us=None, torch_compile_s=None)
                for ev in self.inner.poll(timeout_s)]

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        return self.inner.compare(tasks, wait_s)

    def pin(self, task: str, device_name: str) -> None:
        self.inner.pin(task, device_name)

    def workers(self, wait_s: float = 0.0) -> Workers:
        return self.inner.workers(wait_s)

    def close(self) -> None:
        self.inner.close()


def test_a_campaign_that_ended_before_its_comparators_came_back_has_them_in_its_table(tmp_path: Path) -> None:
    from fsr.evaluate.evaluator import GpuEvaluator

    softmax = tasks.load("softmax")
    config = Config(eval=EvalConfig(torch_compile="off", prepared_max_bytes=shared_budget(),
                                    certify="off"),  # as run_campaign below: nothing certified
                    tune=TuneConfig(trials=0),
                    search=SearchConfig(max_evaluations=1, islands=1, comparators_wait_s=60.0))
    spec = WorkerSpec.of(config, [softmax], warm=True)
    executor = Late(LocalExecutor(lambda: GpuEvaluator(spec, beside=True, campaign=True), max_in_flight=2))
    run_json.write_run_json(tmp_path, cfg_mod.to_dict(config), {"tasks": ["softmax"]})
    try:
        with lineage.LineageWriter(tmp_path) as writer:
            summary = run_campaign([softmax], executor, MutateProposer(), config.search, writer)
    finally:
        executor.close()
    (row,) = lineage.read(tmp_path).to_pylist()
    assert row["verdict"] == "OK" and row["torch_us"] is None  # the campaign ended without them
    wait = summary.comparators
    assert wait is not None and wait.timed == ["softmax"], wait
    (answer,) = wait.answers
    assert answer.library_us and answer.torch_us and answer.worker == "local" and answer.device == row["device"]
    assert wait.spent_s < 60.0 and "1 came back" in wait.text()
    run_json.record_comparators(tmp_path, wait.answers)  # as `fsr run` keeps them
    frame = with_recorded(lineage.read_pandas(tmp_path), run_json.read_run_json(tmp_path))
    (table,) = bench.bench_rows(frame, ["softmax"])
    assert (table["library_us"], table["torch_us"]) == (answer.library_us, answer.torch_us)
    assert table["speedup_torch"] and table["speedup_library"]
