"""A fault of fsr's own machinery in the GPU child is never a verdict on the candidate: the child
says "fault" (not "crash"), the sandbox returns Faulted, and the evaluator retries once on a
fresh child, then raises EvaluatorError. Without a GPU: a stand-in sandbox and a stand-in child."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

import pytest

from fsr import candidate, tasks
from fsr.config import Config, EvalConfig
from fsr.evaluate import evaluator as ev_module
from fsr.evaluate.wire import ChildResult, Died, Faulted, Prepared
from fsr.types import DeviceInfo, Verdict, WorkerSpec

SOFTMAX = tasks.load("softmax")


class FakeSandbox:
    """Answers `ready` (the task's host contents are built) and `prepare`, and `evaluate` with the
    replies given, in order; counts the children."""

    def __init__(self, replies: list[Any]):
        self.device = DeviceInfo("fake", "sm_90")
        self.replies, self.calls, self.restarts = replies, 0, 0
        self.compared: list[Any] = []  # comparator figures timed beside candidates: none here

    def ensure_started(self) -> DeviceInfo:
        return self.device

    def call(self, kind: str, payload: Any, timeout_s: float) -> Any:
        if kind == "ready":
            return True
        if kind == "prepare":
            return Prepared(None)
        assert kind == "evaluate", kind
        self.calls += 1
        reply = self.replies.pop(0)
        if isinstance(reply, (Faulted, Died)):
            self.restarts += 1  # the child is gone: the next call prepares the task in a new one
        return reply

    def close(self) -> None:
        pass


def evaluator(replies: list[Any]) -> ev_module.GpuEvaluator:
    spec = WorkerSpec.of(Config(eval=EvalConfig(torch_compile="off", compile_cache_dir="off")), [SOFTMAX])
    ev = ev_module.GpuEvaluator(spec)
    ev.sandbox = FakeSandbox(replies)  # type: ignore[assignment]
    ev._times[SOFTMAX.name] = ev_module._TaskTimes(1.0, None)  # no baseline run
    return ev


BASE = candidate.parse(SOFTMAX.baseline_source, SOFTMAX)


def test_a_fault_is_retried_once_on_a_fresh_child_and_the_second_answer_stands():
    ev = evaluator([Faulted("evaluator error (CUDARuntimeError: cudaErrorInvalidValue)"),
                    ChildResult(Verdict.WRONG, "at n=1: wrong")])
    try:
        result = ev.evaluate(BASE, tune=False)
    finally:
        ev.close()
    assert result.verdict == Verdict.WRONG and result.message == "at n=1: wrong"
    assert ev.sandbox.calls == 2


def test_two_faults_are_fsrs_error_never_the_candidates_verdict():
    ev = evaluator([Faulted("evaluator error (CUDARuntimeError: cudaErrorInvalidValue)")] * 2)
    try:
        with pytest.raises(ev_module.EvaluatorError, match="cudaErrorInvalidValue"):
            ev.evaluate(BASE, tune=False)
    finally:
        ev.close()
    assert ev.sandbox.calls == 2


def test_a_crash_is_still_the_candidates_verdict_and_not_retried():
    ev = evaluator([Died("the kernel broke the CUDA context: illegal address")])
    try:
        result = ev.evaluate(BASE, tune=False)
    finally:
        ev.close()
    assert result.verdict == Verdict.CRASH and ev.sandbox.calls == 1


def _faulting_child(conn) -> None:
    conn.recv()
    conn.send(("fault", "evaluator error (ValueError: x)"))


def test_the_sandbox_tells_a_fault_from_a_crash():
    from fsr.evaluate.sandbox import Sandbox

    sandbox = Sandbox(WorkerSpec(()))
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_faulting_child, args=(child,), daemon=True)
    process.start()
    sandbox.process, sandbox.conn, sandbox.device = process, parent, DeviceInfo("fake", "sm_90")
    try:
        reply = sandbox.call("evaluate", None, 60)
    finally:
        sandbox.close()
    assert isinstance(reply, Faulted) and "ValueError" in reply.reason and sandbox.process is None
