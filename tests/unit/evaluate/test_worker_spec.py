"""The campaign spec a GPU worker and its GPU child get: tasks travel in it as data, so what a
worker runs is what the driver loaded, whatever happens to the task folders after; the content
hash (the lineage's key for a task's version) is the folder's, as it always was. No GPU."""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fsr import candidate, tasks
from fsr.config import EvalConfig
from fsr.evaluate.compile import CompileFailed
from fsr.evaluate.trial_plan import TrialCompiles, first_points, start_values, tuning_seed
from fsr.types import Verdict, WorkerSpec
from tests.support.paths import ROOT


@pytest.fixture
def softmax_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "softmax"
    shutil.copytree(ROOT / "tasks" / "softmax", folder)
    return folder


def test_the_content_hash_is_the_folders_files_as_before(softmax_copy):
    files = sorted(p for p in softmax_copy.glob("*") if p.is_file() and p.suffix in (".toml", ".py", ".cu"))
    expected = hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()[:16]
    task = tasks.load(softmax_copy)
    assert task.content_hash == expected
    assert task.reference_source == (softmax_copy / "reference.py").read_text()


def test_a_task_changed_on_disk_after_loading_keeps_its_loaded_functions(softmax_copy):
    task = tasks.load(softmax_copy)
    reference = softmax_copy / "reference.py"
    reference.write_text(reference.read_text() + "\nraise RuntimeError('changed mid-campaign')\n")
    tasks.forget()  # as a process that never loaded it: the module comes from the record's text
    inputs = tasks.functions(task).make_inputs({"rows": 3, "cols": 5}, np.random.default_rng(0))
    assert set(inputs) == {a.name for a in task.inputs}
    with pytest.raises(tasks.TaskError, match="changed mid-campaign"):
        tasks.load(softmax_copy)  # a fresh load sees the change, under a new content hash


PROBE = """
import pickle, sys
import numpy as np
from fsr import tasks
spec = pickle.loads(sys.stdin.buffer.read())
task = spec.task("softmax")
out = tasks.functions(task).reference(tasks.functions(task).make_inputs({"rows": 2, "cols": 3},
                                      np.random.default_rng(0)), {"rows": 2, "cols": 3})
print(sorted(out), spec.warm, spec.eval.timeout_s)
"""


def test_a_spec_crosses_to_another_process_with_its_tasks_whole(softmax_copy):
    """The GPU child is spawned with the spec: it needs no task folder at all."""
    spec = WorkerSpec((tasks.load(softmax_copy),), EvalConfig(timeout_s=7.0), warm=("softmax",))
    shutil.rmtree(softmax_copy)
    out = subprocess.run([sys.executable, "-c", PROBE], input=pickle.dumps(spec), capture_output=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().split() == ["['y']", "('softmax',)", "7.0"]


def test_an_evaluator_rejects_a_candidate_of_a_task_outside_its_spec():
    from fsr.evaluate.evaluator import GpuEvaluator

    softmax, gelu = tasks.load("softmax"), tasks.load("gelu")
    evaluator = GpuEvaluator(WorkerSpec((softmax,)))
    try:
        result = evaluator.evaluate(candidate.parse(gelu.baseline_source, gelu))  # no GPU reached
    finally:
        evaluator.close()
    assert result.verdict == Verdict.REJECTED and "not one of this evaluator's tasks (softmax)" in result.message


@pytest.mark.parametrize("mode", ["end", "leads"])
def test_only_a_campaigns_child_builds_certification_inputs_ahead(mode):
    """A GPU child builds a task's certification inputs from its preparation where its spec
    certifies (fsr.evaluate.gpu.child); one evaluation (fsr eval, fsr explore) certifies nothing
    unless asked, so its child gets the mode "off" and spends no host thread on them."""
    from fsr.evaluate.evaluator import GpuEvaluator

    spec = WorkerSpec((tasks.load("softmax"),), EvalConfig(certify=mode))
    for campaign, child_mode in ((False, "off"), (True, mode)):
        evaluator = GpuEvaluator(spec, campaign=campaign)
        try:
            assert evaluator.sandbox.spec.eval.certify == child_mode
            assert evaluator.sandbox.spec.eval == dataclasses.replace(spec.eval, certify=child_mode)
        finally:
            evaluator.close()


def test_the_first_tuning_points_start_from_the_requests_values_else_the_candidates():
    task = tasks.load("sgemm")
    cand = candidate.parse(task.template_source or "", task)
    own = start_values(cand)
    assert own and set(own) == {t.name for t in cand.tunables}
    other = {t.name: t.values[-1] for t in cand.tunables}
    assert start_values(cand, tuple(other.items()) + (("NOT_A_TUNABLE", 1),)) == other
    assert first_points(cand, 8, 0)[0] == own
    assert first_points(cand, 8, 0, tuple(other.items()))[0] == other


def test_trial_compiles_start_once_per_trial_until_forgotten(compiler):
    task = tasks.load("softmax")
    cand = candidate.parse(task.baseline_source, task)
    broken = dataclasses.replace(cand, source=cand.source.replace("{", "{ nonsense;", 1))
    compiles = TrialCompiles(compiler, threads=1)
    first = compiles.submit(broken, task, "sm_90")
    assert compiles.submit(broken, task, "sm_90") is first
    with pytest.raises(CompileFailed, match="nonsense"):
        first.result(timeout=120)
    compiles.forget()
    assert compiles.submit(broken, task, "sm_90") is not first


def test_each_candidate_tunes_from_random_points_of_its_own():
    """TPE's random start-up is seeded by the campaign's seed and the candidate: two candidates of
    one task draw different points (with one seed for all, every candidate measured the same few),
    one candidate the same points each time, and another campaign seed other points."""
    task = tasks.load("sgemm")
    cand = candidate.parse(task.template_source or "", task)
    other = dataclasses.replace(cand, source=cand.source + "\n// another candidate\n")
    assert other.id != cand.id
    assert tuning_seed(cand, 0) == tuning_seed(cand, 0) != tuning_seed(other, 0) != tuning_seed(other, 1)
    mine, theirs = first_points(cand, 8, 0), first_points(other, 8, 0)
    assert mine == first_points(cand, 8, 0)
    assert mine[0] == theirs[0]  # both start from the same defines
    assert mine[1:] != theirs[1:]
    assert first_points(cand, 8, 1)[1:] != mine[1:]
