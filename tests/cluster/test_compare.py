"""RayExecutor.compare on the local test cluster: each task's comparators are asked of a worker
that holds it, on its GPU model, all workers at once; a worker lost meanwhile leaves its tasks,
as fsr's fault in a notice, and the others' answers stand."""

from __future__ import annotations

import pytest

from cluster.testing import EXIT_TASK, TORCH_US, MarkedEvaluatorFactory, candidates
from fsr.types import Evaluation
from tests.cluster.conftest import RAY_WAIT_S, collect

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("ray_cluster")]


def test_comparators_are_asked_of_a_worker_holding_the_task_on_its_model(make):
    ex = make(evaluator_factory=MarkedEvaluatorFactory(latency_s=0.02, models=("ModelA", "ModelB")))
    ex.workers(RAY_WAIT_S)
    got: list[Evaluation] = []
    for task in ("softmax", "other"):
        for c in candidates(3, task=task):
            ex.submit(c)
        got += collect(ex, 3)
    answers = ex.compare(["softmax", "other"], 30.0)
    assert [a.task for a in answers] == ["softmax", "other"]
    for answer in answers:
        ran = {(e.worker, e.device) for e in got if e.task == answer.task}
        assert (answer.worker, answer.device) in ran, (answer, ran)  # where it is prepared, on its model
        assert answer.torch_us == TORCH_US and not answer.left
    assert ex.poll(0.1) == []  # no evaluation came of it


def test_a_worker_lost_while_timing_leaves_its_tasks_as_fsrs_fault(make):
    ex = make(evaluator_factory=MarkedEvaluatorFactory(latency_s=0.02))
    ex.workers(RAY_WAIT_S)
    doomed = f"{EXIT_TASK}-softmax"
    for c in candidates(2, task=doomed):
        ex.submit(c)
    collect(ex, 2)
    (answer,) = ex.compare([doomed], 30.0)
    assert answer.left.startswith("fsr's own fault: worker") and not answer.figures
    assert any("failed while timing the comparators of 1 tasks" in n for n in ex.workers().notices)
