"""A task's baseline is compiled off the GPU's turns: a campaign's worker compiles its tasks'
baselines as soon as its GPU child names the arch, and any evaluator compiles a task's baseline
before the turn in which the task's first preparation times it; the baseline is still timed before
the task's first candidate (the speedups' basis). The GPU child is stood in for."""

from __future__ import annotations

import threading
import time
from typing import Any

from fsr import candidate as cfmt
from fsr import tasks
from fsr.config import Config, TuneConfig
from fsr.evaluate.compile import Compiled, CompileService, full_source
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Verdict, WorkerSpec
from tests.support.stub_child import StubSandbox

SOFTMAX = tasks.load("softmax")
GEMV = tasks.load("gemv")


class WatchedCompiles(CompileService):
    """Compiles in this process (trusted baselines), each noted with whether the evaluator's GPU
    turn was held while it ran: no disk cache, so every program compiled is a real compile."""

    def __init__(self) -> None:
        super().__init__(disk=None)
        self.evaluator: GpuEvaluator | None = None
        self.compiles: list[tuple[str, bool]] = []  # (source, GPU turn held)

    def _miss(self, source: str, kernels: tuple[str, ...], options: tuple[str, ...]) -> Compiled:
        assert self.evaluator is not None
        held = self.evaluator._gpu._owner is not None
        self.compiles.append((source, held))
        return super()._miss(source, kernels, options)


def evaluator_of(task_list: list[tasks.Task], campaign: bool) -> tuple[GpuEvaluator, WatchedCompiles, StubSandbox]:
    compiler, sandbox = WatchedCompiles(), StubSandbox()
    spec = WorkerSpec.of(Config(tune=TuneConfig(trials=0)), task_list, warm=True)
    evaluator = GpuEvaluator(spec, compiler=compiler, campaign=campaign)
    evaluator.sandbox = sandbox  # type: ignore[assignment]  # the stand-in answers what the Sandbox would
    compiler.evaluator = evaluator
    return evaluator, compiler, sandbox


def baseline_compiles(compiler: WatchedCompiles, task: tasks.Task) -> list[bool]:
    """Whether the GPU turn was held, for each compile of the task's baseline."""
    source = full_source(cfmt.parse(task.baseline_source, task))
    return [held for text, held in compiler.compiles if text == source]


def wait_for(condition: Any, within_s: float = 60.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_a_campaigns_worker_compiles_its_tasks_baselines_once_its_child_names_the_arch() -> None:
    evaluator, compiler, sandbox = evaluator_of([SOFTMAX, GEMV], campaign=True)
    try:
        assert compiler.compiles == []  # the arch is not known before the child starts
        evaluator.device()
        assert wait_for(lambda: len(compiler.compiles) == 2), compiler.compiles
        assert baseline_compiles(compiler, SOFTMAX) == [False] and baseline_compiles(compiler, GEMV) == [False]
        candidate = cfmt.with_defines(cfmt.parse(SOFTMAX.baseline_source, SOFTMAX), {"BLOCK": 128})
        result = evaluator.evaluate(candidate)
        assert result.verdict == Verdict.OK and result.baseline_us is not None
        assert baseline_compiles(compiler, SOFTMAX) == [False]  # found in memory when it was timed
        timed = [p.candidate.id for kind, p in sandbox.payloads if kind == "evaluate"]
        assert timed == [cfmt.parse(SOFTMAX.baseline_source, SOFTMAX).id, candidate.id]  # the basis first
    finally:
        evaluator.close()


def test_a_tasks_baseline_is_compiled_before_the_gpu_turn_that_times_it() -> None:
    """Outside a campaign (fsr eval) nothing is compiled ahead; the first candidate of a task
    still compiles the baseline before it takes the GPU, and no other call waits on that compile."""
    evaluator, compiler, sandbox = evaluator_of([SOFTMAX], campaign=False)
    try:
        evaluator.device()
        time.sleep(0.2)
        assert compiler.compiles == []
        candidates = [cfmt.with_defines(cfmt.parse(SOFTMAX.baseline_source, SOFTMAX), {"BLOCK": b}) for b in (128, 512)]
        results: list[Any] = []
        threads = [threading.Thread(target=lambda c=c: results.append(evaluator.evaluate(c))) for c in candidates]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert [r.verdict for r in results] == [Verdict.OK, Verdict.OK]
        assert baseline_compiles(compiler, SOFTMAX) == [False]
        assert not any(held for _, held in compiler.compiles)  # no compile at all under the GPU's turn
        assert [kind for kind, _ in sandbox.payloads].count("prepare") == 1
    finally:
        evaluator.close()


def test_a_tasks_baseline_is_judged_once_whether_it_comes_first_or_later() -> None:
    """The preparation judges the baseline untuned; the baseline sent as a candidate (the offline
    search's first move of every task) has nothing to tune, so it is answered from that judgement,
    before or after another candidate of its task, with no second turn on the GPU."""
    base = cfmt.parse(SOFTMAX.baseline_source, SOFTMAX)
    other = cfmt.with_defines(base, {"BLOCK": 128})
    for order in ([base, other], [other, base]):
        evaluator, _, sandbox = evaluator_of([SOFTMAX], campaign=True)
        try:
            results = {r.candidate_id: r for r in map(evaluator.evaluate, order)}
            timed = [p.candidate.id for kind, p in sandbox.payloads if kind == "evaluate"]
            assert timed == [base.id, other.id]  # the basis first, each program once
            kinds = [kind for kind, _ in sandbox.payloads if kind != "ready"]
            assert kinds[0] == "prepare"
            row = results[base.id]
            assert row.verdict == Verdict.OK and row.timing is not None and not row.answered_from
            assert row.baseline_us == row.timing.median_us and row.speedup == 1.0
            assert results[other.id].baseline_us == row.baseline_us
        finally:
            evaluator.close()
