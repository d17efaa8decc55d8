"""A failure of fsr's own machinery in the GPU child is never a verdict on the candidate: the
child tells it apart from a kernel's crash ("fault", not "crash"), the sandbox returns Faulted,
and the evaluator sends the request once more to a fresh child, then raises EvaluatorFault. A
context the kernel broke, whichever call found out, is still the candidate's CRASH. Without a
GPU: CuPy's error objects, a stand-in child process and a stand-in sandbox."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

import pytest

from fsr import candidate, tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.evaluate import evaluator as ev_module
from fsr.evaluate.wire import ChildResult, Died, Faulted, Prepared, TimedOut
from fsr.types import DeviceInfo, EvaluatorFault, Verdict, WorkerSpec

cp = pytest.importorskip("cupy")

from fsr.evaluate.gpu.programs import failure_reply  # noqa: E402

SOFTMAX = tasks.load("softmax")
BASE = candidate.parse(SOFTMAX.baseline_source, SOFTMAX)
INVALID_VALUE = "evaluator error (CUDARuntimeError: cudaErrorInvalidValue: invalid argument)"


def usable() -> None:
    return None


def test_a_failure_of_fsrs_own_code_is_a_fault():
    for error in (cp.cuda.runtime.CUDARuntimeError(1), KeyError("x"), ValueError("bad shape")):
        status, line = failure_reply(error, probe=usable)
        assert status == "fault" and type(error).__name__ in line and "\n" not in line, line


def test_a_context_the_kernel_broke_is_its_crash_whichever_call_found_out():
    status, line = failure_reply(cp.cuda.runtime.CUDARuntimeError(700), probe=usable)
    assert status == "crash" and "outside its buffers" in line
    # fsr's own call failed first, but the context is gone: the kernel's fault found late
    status, line = failure_reply(ValueError("bad shape"), probe=lambda: cp.cuda.runtime.CUDARuntimeError(719))
    assert status == "crash" and "faulted" in line and "ValueError" not in line


def test_device_memory_the_candidates_buffers_did_not_get_is_its_crash():
    status, line = failure_reply(cp.cuda.memory.OutOfMemoryError(1 << 40, 1 << 30, 0), probe=usable)
    assert status == "crash" and "out of GPU memory" in line


def _stand_in_child(conn: Any, status: str, line: str) -> None:
    conn.recv()
    conn.send((status, line))


@pytest.mark.parametrize("status,kind", [("fault", Faulted), ("crash", Died)])
def test_the_sandbox_tells_a_fault_from_a_crash(status, kind):
    from fsr.evaluate.sandbox import Sandbox

    sandbox = Sandbox(WorkerSpec(()))
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_stand_in_child, args=(child, status, INVALID_VALUE), daemon=True)
    process.start()
    child.close()
    sandbox.process, sandbox.conn, sandbox.device = process, parent, DeviceInfo("fake", "sm_90")
    try:
        reply = sandbox.call("evaluate", None, 60)
    finally:
        sandbox.close()
    assert type(reply) is kind and reply.reason == INVALID_VALUE
    assert sandbox.process is None and sandbox.restarts == 1  # gone: the next call starts a fresh child


class StandInSandbox:
    """Answers `ready` and `prepare` (or the preparation replies given), and `evaluate` with the
    replies given, in order; a Died, Faulted or TimedOut ends the child, as the real one's does."""

    def __init__(self, replies: list[Any], preparations: list[Any] | None = None):
        self.device = DeviceInfo("fake", "sm_90")
        self.replies, self.preparations = replies, list(preparations or [])
        self.calls, self.restarts, self.compared = 0, 0, []

    def ensure_started(self) -> DeviceInfo:
        return self.device

    def call(self, kind: str, payload: Any, timeout_s: float) -> Any:
        if kind == "ready":
            return True
        reply = (self.preparations.pop(0) if self.preparations else Prepared(None)) if kind == "prepare" else None
        if kind == "evaluate":
            self.calls += 1
            reply = self.replies.pop(0)
        if isinstance(reply, (Died, Faulted, TimedOut)):
            self.restarts += 1
        return reply

    def close(self) -> None:
        pass


@pytest.fixture
def make_evaluator(compiler):
    made = []

    def make(replies: list[Any], preparations: list[Any] | None = None) -> ev_module.GpuEvaluator:
        spec = WorkerSpec.of(Config(eval=EvalConfig(torch_compile="off"), tune=TuneConfig(trials=0)), [SOFTMAX])
        ev = ev_module.GpuEvaluator(spec, compiler=compiler)
        ev.sandbox = StandInSandbox(replies, preparations)  # type: ignore[assignment]
        ev._times[SOFTMAX.name] = ev_module._TaskTimes(1.0, None)  # no baseline run
        made.append(ev)
        return ev

    yield make
    for ev in made:
        ev._compiles.shutdown(wait=False, cancel_futures=True)


def test_a_fault_is_sent_again_to_a_fresh_child_and_the_second_answer_stands(make_evaluator):
    ev = make_evaluator([Faulted(INVALID_VALUE), ChildResult(Verdict.WRONG, "at rows=1,cols=1: wrong")])
    result = ev.evaluate(BASE, tune=False)
    assert result.verdict == Verdict.WRONG and result.message == "at rows=1,cols=1: wrong"
    assert ev.sandbox.calls == 2


def test_two_faults_are_fsrs_error_never_the_candidates_verdict(make_evaluator):
    ev = make_evaluator([Faulted(INVALID_VALUE)] * 2)
    with pytest.raises(EvaluatorFault, match="cudaErrorInvalidValue") as info:
        ev.evaluate(BASE, tune=False)
    assert BASE.id in str(info.value) and "twice" in str(info.value)
    assert ev.sandbox.calls == 2


def test_a_task_that_cannot_be_prepared_is_fsrs_error_too(make_evaluator):
    """Preparing runs no candidate: its failure is sent again to a fresh child, then raised as
    fsr's (the first preparation, and the one after a fault in the candidate's request)."""
    ev = make_evaluator([ChildResult(Verdict.WRONG, "wrong")], preparations=[Faulted(INVALID_VALUE), Prepared(None)])
    assert ev.evaluate(BASE, tune=False).verdict == Verdict.WRONG
    ev = make_evaluator([], preparations=[Faulted(INVALID_VALUE)] * 2)
    with pytest.raises(EvaluatorFault, match="preparing its inputs failed"):
        ev.evaluate(BASE, tune=False)
    ev = make_evaluator([Faulted(INVALID_VALUE)], preparations=[Prepared(None), Faulted(INVALID_VALUE)])
    with pytest.raises(EvaluatorFault, match="twice.*preparing its inputs failed"):
        ev.evaluate(BASE, tune=False)
    assert ev.sandbox.calls == 1


@pytest.mark.parametrize("reply,verdict", [
    (Died("the kernel broke the CUDA context: cudaErrorIllegalAddress (the kernel read or wrote memory outside "
          "its buffers); the GPU child was replaced"), Verdict.CRASH),
    (TimedOut(9.0), Verdict.TIMEOUT),
])
def test_a_crash_or_a_hang_is_still_the_candidates_verdict_and_not_sent_again(make_evaluator, reply, verdict):
    ev = make_evaluator([reply])
    result = ev.evaluate(BASE, tune=False)
    assert result.verdict == verdict and ev.sandbox.calls == 1


def test_a_fault_while_timing_the_baseline_leaves_no_times_without_it(make_evaluator):
    """The task's baseline is judged while the task is prepared: fsr's fault there (twice, in
    two preparations) is raised, and the next preparation times the baseline again rather than
    reading speedups against none."""
    ev = make_evaluator([Faulted(INVALID_VALUE)] * 4)
    ev._times.clear()
    with pytest.raises(EvaluatorFault, match="cudaErrorInvalidValue"):
        ev.evaluate(BASE, tune=False)
    assert ev.sandbox.calls == 4 and SOFTMAX.name not in ev._times
