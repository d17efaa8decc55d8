"""The GPU child's comparator thread and its locks, without a GPU: Inductor's benchmarks wait for
the child's GPU gate (never beside a timed candidate) unless waiting could deadlock, and the
thread takes the torch lock and the gate together without holding the lock against a waiter."""

from __future__ import annotations

import threading
import time

from fsr.evaluate.gpu.beside import both, gated
from fsr.torch_lock import torch_lock


def held_elsewhere(lock, release: threading.Event) -> threading.Thread:
    """`lock` held by another thread until `release` is set."""
    taken = threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(5)
    return thread


def test_a_gated_benchmark_waits_for_the_gate():
    gate, release, ran = threading.RLock(), threading.Event(), []
    holder = held_elsewhere(gate, release)
    bench = gated(lambda: ran.append(time.monotonic()), gate, lambda: False)
    runner = threading.Thread(target=bench)
    runner.start()
    time.sleep(0.3)
    assert ran == []  # the gate's holder is timing a candidate
    released_at = time.monotonic()
    release.set()
    runner.join(5)
    holder.join(5)
    assert len(ran) == 1 and ran[0] >= released_at


def test_a_gated_benchmark_runs_without_the_gate_where_waiting_could_deadlock():
    gate, release, ran = threading.RLock(), threading.Event(), []
    holder = held_elsewhere(gate, release)
    try:
        gated(lambda: ran.append(1), gate, lambda: True)()
        assert ran == [1]
    finally:
        release.set()
        holder.join(5)


def test_both_locks_are_taken_and_the_torch_lock_is_let_go_to_a_waiter_meanwhile():
    """The comparator thread wants the torch lock and the gate; the gate's holder waits for the
    torch lock (an imported task's reference): the thread lets go of the lock so the holder can
    finish, then takes both."""
    gate, lock = threading.RLock(), torch_lock()
    order: list[str] = []
    holder_has_gate, comparator_waits = threading.Event(), threading.Event()

    def holder() -> None:  # the child's loop: holds the gate, then needs the torch lock
        with gate:
            holder_has_gate.set()
            comparator_waits.wait(5)
            time.sleep(0.2)
            with lock:
                order.append("holder")

    def comparator() -> None:
        holder_has_gate.wait(5)
        comparator_waits.set()
        with both(gate):
            order.append("comparator")

    threads = [threading.Thread(target=holder), threading.Thread(target=comparator)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads), "deadlock: the torch lock was held against the gate's holder"
    assert order == ["holder", "comparator"]


def test_a_campaign_evaluator_asks_each_child_once_and_merges_what_comes_back():
    """beside=True: a task's comparators are asked of a child once ("beside"), asked again of a
    child that replaced one that died before answering, never again once they came back; their
    figures reach the task's times and their GPU seconds are owed to the next evaluation.
    beside=False (fsr eval): "now", once per evaluator."""
    from fsr import tasks
    from fsr.config import EvalConfig, TuneConfig
    from fsr.evaluate.evaluator import GpuEvaluator, _TaskTimes
    from fsr.evaluate.wire import Compared
    from fsr.types import WorkerSpec

    softmax = tasks.load("softmax")
    spec = WorkerSpec((softmax,), EvalConfig(), TuneConfig(trials=0))
    ev = GpuEvaluator(spec, beside=True)
    try:
        assert ev._comparators(softmax) == "beside"
        ev._times["softmax"] = _TaskTimes(12.0, None)
        assert ev._comparators(softmax) == ""  # pending in this child
        ev.sandbox.restarts += 1  # the child died before answering
        assert ev._comparators(softmax) == "beside"
        ev.sandbox.compared.append(Compared("softmax", 5.0, 6.0, 4.0, 20.0, 0.75))
        times = ev._take_compared(softmax)
        assert (times.baseline_us, times.library_us, times.torch_us, times.torch_compile_us,
                times.torch_compile_s) == (12.0, 5.0, 6.0, 4.0, 20.0)
        assert ev._owed_s == 0.75 and ev.sandbox.compared == []
        ev.sandbox.restarts += 1
        assert ev._comparators(softmax) == ""  # timed: never asked again
    finally:
        ev.close()
    now = GpuEvaluator(spec)
    try:
        assert now._comparators(softmax) == "now"
        now._times["softmax"] = _TaskTimes(12.0, 5.0)
        assert now._comparators(softmax) == ""
    finally:
        now.close()


def test_the_switch_interval_is_short_only_while_compiling():
    import sys

    from fsr.evaluate.gpu.beside import SWITCH_S, short_switches

    before = sys.getswitchinterval()
    with short_switches():
        assert abs(sys.getswitchinterval() - min(before, SWITCH_S)) < 1e-9 and sys.getswitchinterval() < 0.005
    assert sys.getswitchinterval() == before


def test_an_evaluation_returns_without_waiting_for_the_gpu_lock_another_candidate_holds():
    """The comparators' owed seconds are taken under a lock of their own: under the GPU lock, an
    evaluation's result waited for another in-flight candidate's whole run on the GPU."""
    from fsr import candidate, tasks
    from fsr.config import EvalConfig, TuneConfig
    from fsr.evaluate.evaluator import GpuEvaluator
    from fsr.types import Verdict, WorkerSpec

    softmax, layernorm = tasks.load("softmax"), tasks.load("layernorm")
    ev = GpuEvaluator(WorkerSpec((layernorm,), EvalConfig(), TuneConfig(trials=0)), beside=True)
    release = threading.Event()
    holder = held_elsewhere(ev._gpu, release)  # another candidate running on the GPU
    try:
        started = time.monotonic()
        result = ev.evaluate(candidate.parse(softmax.baseline_source, softmax))  # not this worker's task
        assert result.verdict == Verdict.REJECTED and time.monotonic() - started < 2.0
    finally:
        release.set()
        holder.join(5)
        ev.close()
