"""Resume: islands, policy, seen ids and budgets rebuilt from the lineage; a killed search
finishes its budget without evaluating any candidate twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsr.config import SearchConfig
from fsr.execute.local import EvaluatorUnavailable
from fsr.lineage import LineageWriter, read
from fsr.propose.mutate import MutateProposer
from fsr.search.loop import Driver, run_campaign
from fsr.search.pool import ProposalPool
from fsr.search.state import CampaignState
from fsr.testing.fakes import FakeEvaluator, FakeExecutor, softmax_task
from tests.support.paths import ROOT

BUDGET = 200
CHILD = """
import sys
from fsr.config import SearchConfig
from fsr.execute.local import EvaluatorUnavailable
from fsr.lineage import LineageWriter
from fsr.propose.mutate import MutateProposer
from fsr.search.loop import Driver, run_campaign
from fsr.search.pool import ProposalPool
from fsr.testing.fakes import FakeEvaluator, FakeExecutor, softmax_task

writer = LineageWriter(sys.argv[1], batch_rows=4, batch_age_s=0.05)
executor = FakeExecutor(FakeEvaluator(effects={"VEC4": 2.0}), slots=4, eval_s=0.04, real_time=True)  # ~2 s: time to kill it midway
run_campaign([softmax_task()], executor, MutateProposer(), SearchConfig(max_evaluations=%d, seed=5), writer)
writer.close()
"""


def rows_in(run_dir: Path) -> int:
    try:
        return read(run_dir).num_rows
    except Exception:  # a part being renamed into place, or no directory yet
        return 0


def test_killed_search_resumes_to_its_budget_without_repeating_a_candidate(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD % BUDGET, str(tmp_path)], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 30
        while rows_in(tmp_path) < 40 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert child.poll() is None, "the search ended before it could be killed"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    before = rows_in(tmp_path)
    assert 40 <= before < BUDGET

    evaluator = FakeEvaluator(effects={"VEC4": 2.0})
    with LineageWriter(tmp_path) as writer:
        summary = run_campaign([softmax_task()], FakeExecutor(evaluator, slots=4), MutateProposer(),
                               SearchConfig(max_evaluations=BUDGET, seed=5), writer, resume=tmp_path)
    ids = read(tmp_path).column("candidate_id").to_pylist()
    assert len(ids) == BUDGET == len(set(ids))
    assert summary.resumed == before and summary.evaluations == BUDGET - before
    assert not set(evaluator.calls) & set(ids[:before])  # nothing evaluated before ran again


def test_loaded_state_equals_the_state_that_wrote_the_lineage(tmp_path):
    task, config = softmax_task(), SearchConfig(max_evaluations=80, seed=9, migrate_every=10)
    proposer = MutateProposer()
    live = CampaignState([task], config, lambda t: proposer.describe(t).features)
    executor = FakeExecutor(FakeEvaluator(effects={"ONLINE": 1.5}, fail_fraction=0.1), slots=6)
    with LineageWriter(tmp_path) as writer:
        Driver(live, executor, ProposalPool(proposer), writer, None).run()
    loaded = CampaignState([task], config, lambda t: proposer.describe(t).features)
    assert loaded.load(read(tmp_path)) == 80
    a, b = live.tasks[task.name], loaded.tasks[task.name]
    assert b.submitted == b.finished == 80 and loaded.seen == live.seen
    assert b.best is not None and b.best.id == a.best.id and b.verdicts == a.verdicts
    assert b.policy.count == a.policy.count and sum(a.policy.count.values()) > 0
    assert b.policy.total == pytest.approx(a.policy.total)
    assert [[m.id for m in i.population] for i in b.islands] == [[m.id for m in i.population] for i in a.islands]
    assert [[m.id for m in i.failures] for i in b.islands] == [[m.id for m in i.failures] for i in a.islands]
    assert b.migrations == a.migrations and a.migrations
    assert loaded.prior_wall_s > 0


def test_resuming_a_finished_run_evaluates_nothing(tmp_path):
    task, config = softmax_task(), SearchConfig(max_evaluations=30, seed=1)
    with LineageWriter(tmp_path) as writer:
        run_campaign([task], FakeExecutor(FakeEvaluator(), slots=4), MutateProposer(), config, writer)
    executor = FakeExecutor(FakeEvaluator(), slots=4)
    summary = run_campaign([task], executor, MutateProposer(), config, resume=tmp_path)
    assert executor.submitted == [] and summary.resumed == 30 and summary.evaluations == 0
    assert summary.tasks[0].best_us is not None  # the best so far is known from the lineage


def test_resume_with_a_larger_budget_only_adds_new_candidates(tmp_path):
    task = softmax_task()
    with LineageWriter(tmp_path) as writer:
        run_campaign([task], FakeExecutor(FakeEvaluator(), slots=4), MutateProposer(),
                     SearchConfig(max_evaluations=40, seed=2), writer)
    old = set(read(tmp_path).column("candidate_id").to_pylist())
    executor = FakeExecutor(FakeEvaluator(), slots=4)
    run_campaign([task], executor, MutateProposer(), SearchConfig(max_evaluations=70, seed=2), resume=tmp_path)
    assert len(executor.submitted) == 30 and not old & set(executor.submitted)


def test_a_resumed_task_stays_on_the_gpu_model_it_started_on(tmp_path):
    task = softmax_task()
    with LineageWriter(tmp_path) as writer:  # the first run had only an "A" GPU
        run_campaign([task], FakeExecutor(FakeEvaluator(), slots=4, models=("A",)), MutateProposer(),
                     SearchConfig(max_evaluations=20, seed=3), writer)
    # The resumed run has more "B" GPUs than "A" ones: left to itself, the task would go to B.
    executor = FakeExecutor(FakeEvaluator(), slots=4, models=("B", "B", "A"))
    with LineageWriter(tmp_path) as writer:
        run_campaign([task], executor, MutateProposer(), SearchConfig(max_evaluations=40, seed=3), writer,
                     resume=tmp_path)
    assert executor.pins == {task.name: "A"} and len(executor.submitted) == 20
    assert set(read(tmp_path).column("device").to_pylist()) == {"A"}


def test_a_resumed_task_whose_gpu_model_is_gone_is_refused_not_mixed(tmp_path):
    task = softmax_task()
    with LineageWriter(tmp_path) as writer:
        run_campaign([task], FakeExecutor(FakeEvaluator(), slots=4, models=("A",)), MutateProposer(),
                     SearchConfig(max_evaluations=10, seed=3), writer)
    executor = FakeExecutor(FakeEvaluator(), slots=4, models=("B",))
    with pytest.raises(EvaluatorUnavailable, match="pinned to GPU model 'A'"):
        run_campaign([task], executor, MutateProposer(), SearchConfig(max_evaluations=20, seed=3), resume=tmp_path)
    assert executor.submitted == []
