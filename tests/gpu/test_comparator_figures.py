"""The comparators' figures on a real GPU: `fsr eval` reports them with the kernel's resources and
stages; a comparator that fails leaves no figure and no verdict; torch.compile is timed apart from
its compile, before a candidate or beside a campaign's first candidates, and "off" means off. Each
test builds the evaluators it is about (torch.compile on only where a test reads its figures)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

from fsr import candidate, tasks
from fsr.config import EvalConfig, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Verdict, WorkerSpec
from tests.support.paths import ROOT
from tests.support.xdist_gpus import shared_budget

pytestmark = pytest.mark.gpu


def test_fsr_eval_command_reports_resources_and_stages(tmp_path):
    config = tmp_path / "fsr.toml"
    # PyTorch eager is timed, torch.compile is read nowhere here; the child takes this worker's share of the GPU
    config.write_text(f'[eval]\ntorch_compile = "off"\nprepared_max_bytes = {shared_budget()}\n')
    out = subprocess.run([sys.executable, "-m", "fsr", "--config", str(config), "eval", "softmax",
                          "tasks/softmax/baseline.cu", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.splitlines()[-1])
    assert data["verdict"] == "OK" and data["resources"]["registers"] > 0
    assert data["verify_s"] > 0 and data["bench_s"] > 0
    assert data["torch_us"] > 0 and data["vs_torch"] > 0  # torch.softmax, timed like the library


def test_a_torch_comparator_that_fails_leaves_no_figure_and_no_verdict(tmp_path):
    shutil.copytree(ROOT / "tasks" / "softmax", tmp_path / "softmax")
    reference = tmp_path / "softmax" / "reference.py"
    text = reference.read_text()
    head = "def torch_eager(inputs, sizes):\n"
    assert head in text  # else the comparator below would not be the broken one
    reference.write_text(text.replace(head, head + "    raise RuntimeError('broken comparator')\n"))
    task = tasks.load("softmax", str(tmp_path))
    # torch.compile off: the broken function is eager's; beside other workers, the worker's share
    ev = GpuEvaluator(WorkerSpec((task,), EvalConfig(torch_compile="off", prepared_max_bytes=shared_budget()),
                                 TuneConfig(trials=0)))
    try:
        result = ev.evaluate(candidate.parse(task.baseline_source, task))
    finally:
        ev.close()
    assert result.verdict == Verdict.OK, result.message
    assert result.torch_us is None and result.library_us


def test_torch_compile_is_timed_apart_from_its_compile_and_off_means_off():
    pytest.importorskip("torch")
    softmax = tasks.load("softmax")
    times = {}
    for mode in ("default", "off"):
        ev = GpuEvaluator(WorkerSpec((softmax,), EvalConfig(torch_compile=mode, prepared_max_bytes=shared_budget()), TuneConfig(trials=0)))
        try:
            times[mode] = ev.evaluate(candidate.parse(softmax.baseline_source, softmax))
        finally:
            ev.close()
    on, off = times["default"], times["off"]
    assert on.verdict == Verdict.OK and on.torch_us and on.torch_compile_us and on.torch_compile_s
    assert on.torch_compile_s > on.torch_compile_us * 1e-6 * 100  # the compile is not in the latency
    assert 0.2 < on.torch_compile_us / on.torch_us < 5  # the same op, timed alike
    assert off.torch_compile_us is None and off.torch_compile_s is None and off.torch_us


def test_comparators_timed_beside_candidates_reach_later_evaluations_and_are_charged():
    """A campaign's evaluator (beside=True) does not wait for torch.compile: the first candidates
    of a task carry no comparator figures, later ones carry the same kind of figures the
    foreground path gives (torch.compile's compile apart from its latency), and the seconds the
    comparators held the GPU are charged as preparing (the total setup exceeds the first
    evaluation's)."""
    pytest.importorskip("torch")
    softmax = tasks.load("softmax")
    kernel = candidate.parse(softmax.baseline_source, softmax)
    ev = GpuEvaluator(WorkerSpec((softmax,), EvalConfig(torch_compile="default", prepared_max_bytes=shared_budget()), TuneConfig(trials=0)), beside=True)
    try:
        results = [ev.evaluate(kernel)]
        deadline = time.monotonic() + 240
        while not results[-1].torch_compile_us and time.monotonic() < deadline:
            results.append(ev.evaluate(kernel))
    finally:
        ev.close()
    first, last = results[0], results[-1]
    assert all(r.verdict == Verdict.OK for r in results), [r.message for r in results]
    assert first.torch_us is None and first.torch_compile_us is None  # not waited for
    assert len(results) > 1, "the comparators were not timed beside the first candidate"
    assert last.torch_us and last.torch_compile_us and last.torch_compile_s and last.library_us
    assert last.torch_compile_s > last.torch_compile_us * 1e-6 * 100
    assert 0.2 < last.torch_compile_us / last.torch_us < 5
    assert sum(r.setup_s for r in results[1:]) > 0  # the comparators' GPU seconds, charged
