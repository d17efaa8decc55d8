"""One evaluator on a worker thread: the executor behind `fsr eval` and for debugging (no Ray).

The evaluator is built once, on the worker thread and only when first needed, so that a slow
construction (CUDA context, ceiling measurements) is never paid by the caller of the
constructor. Candidates are evaluated one at a time in submission order; `max_in_flight > 1`
only lets the caller queue the next candidates so the evaluator never waits for the loop.
A `compare` request (a campaign's comparators, after its last evaluation) is queued on the same
thread, after the candidates before it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace

from fsr.execute import base
from fsr.execute.base import Evaluator, Workers, WorkerStats
from fsr.types import Candidate, Comparison, DeviceInfo, Evaluation, EvaluatorFault, Verdict

log = logging.getLogger(__name__)

WORKER_NAME = "local"


class EvaluatorUnavailable(RuntimeError):
    """Nothing can be evaluated: the evaluator could not be built (no GPU, broken toolchain), its
    own machinery failed on a candidate (EvaluatorFault: no verdict, and the local executor has
    no other worker to send it to), or a cluster has no worker left (cluster.executor
    .NoWorkerError). One line; what was evaluated before is in the lineage."""


def crash_evaluation(candidate: Candidate, message: str, device: str = "") -> Evaluation:
    """The verdict for a candidate whose evaluator raised or whose worker died under it."""
    return Evaluation(candidate_id=candidate.id, task=candidate.task, verdict=Verdict.CRASH,
                      message=message, device=device)


@dataclass(frozen=True)
class _Compare:
    """A `compare` request on its way to the worker thread, and where its answer goes."""

    tasks: tuple[str, ...]
    wait_s: float
    answer: Future[list[Comparison]]


class LocalExecutor:
    """Executor over one evaluator running on a background thread of this process."""

    def __init__(self, evaluator_factory: Callable[[], Evaluator], max_in_flight: int = 1):
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self._factory = evaluator_factory
        self._max_in_flight = max_in_flight
        self._inbox: queue.Queue[Candidate | _Compare | None] = queue.Queue()
        self._outbox: queue.Queue[Evaluation] = queue.Queue()
        self._in_flight = 0  # submitted and not yet handed out by poll; caller's thread only
        self._pins: dict[str, str] = {}  # task -> GPU model it must be evaluated on
        self._thread: threading.Thread | None = None
        self._closed = False
        self._built = threading.Event()  # set once the factory returned or raised
        self._evaluator: Evaluator | None = None
        self._device: DeviceInfo | None = None
        self._build_error: BaseException | None = None
        self._fault: EvaluatorFault | None = None  # fsr's own failure on a candidate: the worker stopped
        # Busy accounting, written by the worker thread under the lock.
        self._lock = threading.Lock()
        self._ready_at: float | None = None
        self._stopped_at: float | None = None
        self._busy_s = 0.0
        self._setup_s = 0.0  # of _busy_s, the evaluations' waits on setup (child start, preparing)
        self._busy_since: float | None = None
        self._evaluations = 0
        self._crashes = 0  # evaluations that raised (an evaluator bug), given CRASH here

    # --- Executor ---------------------------------------------------------------------------

    def free_slots(self) -> int:
        """Candidates that may be submitted now without exceeding `max_in_flight`."""
        if self._closed or self._build_error is not None or self._fault is not None:
            return 0
        return max(0, self._max_in_flight - self._in_flight)

    def submit(self, candidate: Candidate) -> None:
        """Queue a candidate for the worker thread (starting it, and the evaluator, if needed)."""
        if self._closed:
            raise RuntimeError("submit on a closed LocalExecutor")
        self._raise_if_unavailable()
        self._start()
        self._check_pin(candidate.task)
        self._in_flight += 1
        self._inbox.put(candidate)

    def poll(self, timeout_s: float) -> list[Evaluation]:
        """Finished evaluations; waits up to `timeout_s` for the first when any is in flight."""
        out: list[Evaluation] = []
        deadline = time.monotonic() + max(0.0, timeout_s)
        while self._in_flight > 0 and not out:
            self._raise_if_unavailable()
            # Wake up now and then so that a failed build is reported without waiting it out.
            wait_s = min(deadline - time.monotonic(), 0.5)
            if wait_s <= 0:
                break
            try:
                out.append(self._outbox.get(timeout=wait_s))
            except queue.Empty:
                continue
        while True:
            try:
                out.append(self._outbox.get_nowait())
            except queue.Empty:
                break
        self._in_flight -= len(out)
        return out

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        """The evaluator's answer for `tasks` (Executor.compare), from the worker thread once the
        candidates queued before are done; a worker that cannot answer within the bound (and
        COMPARE_GRACE_S) leaves every task with why."""
        names = tuple(tasks)
        if not names:
            return []
        if not self._closed:
            self._start()
            self._built.wait(max(0.0, wait_s))  # built long ago after a campaign's evaluations
        why = "the worker is closed" if self._closed else self._unavailable() or \
            ("" if self._built.is_set() else f"the evaluator was not built within the {wait_s:g}-s bound")
        if not why:
            request = _Compare(names, wait_s, Future())
            self._inbox.put(request)
            try:
                answers = request.answer.result(timeout=max(0.0, wait_s) + base.COMPARE_GRACE_S)
                return [replace(c, worker=WORKER_NAME) for c in answers]
            except FutureTimeout:
                request.answer.cancel()
                why = f"the worker did not answer within the {wait_s:g}-s bound"
            except Exception as e:  # fsr's own machinery failed: no verdict, and nothing written is touched
                why = f"fsr's own fault while timing them: {' '.join(str(e).split())[:300]}"
        return [Comparison(name, worker=WORKER_NAME, left=why) for name in names]

    def close(self) -> None:
        """Stop the worker after the evaluation in progress; queued candidates are dropped."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            return
        while True:  # drop what has not started; the sentinel makes the thread close the evaluator
            try:
                dropped = self._inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(dropped, _Compare):
                dropped.answer.cancel()
        self._inbox.put(None)
        self._thread.join()

    # --- the worker -------------------------------------------------------------------------

    def workers(self, wait_s: float = 0.0) -> Workers:
        """The one worker: its GPU once the evaluator is built (waiting up to `wait_s`, building it
        if needed; EvaluatorUnavailable if it cannot be), its counters (no restarts: a local
        evaluator that fails stops the run), no notices (a failure raises instead)."""
        if wait_s > 0:
            self._start()
            self._built.wait(wait_s)
            self._raise_if_unavailable()
        devices = {WORKER_NAME: self._device} if self._device is not None else {}
        return Workers(devices, tuple(self._stats()))

    def _stats(self) -> list[WorkerStats]:
        busy, alive = self._busy_alive_s()
        with self._lock:
            evaluations, crashes, setup = self._evaluations, self._crashes, self._setup_s
        state = "stopped" if self._closed else "ready" if self._ready_at is not None else "starting"
        device = self._device.name if self._device else ""
        return [WorkerStats(WORKER_NAME, state, device, self._in_flight, evaluations, crashes, 0, 0, busy, alive,
                            setup_s=min(setup, busy))]

    def pin(self, task: str, device_name: str) -> None:
        """Refuse `task`'s candidates unless this GPU is a `device_name` (checked on submit)."""
        self._pins[task] = device_name

    def _gpu(self) -> DeviceInfo:
        """The worker's GPU, building the evaluator if needed (blocks until it is built)."""
        self._start()
        self._built.wait()
        self._raise_if_unavailable()
        assert self._device is not None
        return self._device

    def _check_pin(self, task: str) -> None:
        """A pinned task's model must be this GPU's; finding that out waits for the evaluator."""
        model = self._pins.get(task)
        if model is None:
            return
        device = self._gpu().name
        if device != model:
            raise EvaluatorUnavailable(
                f"task {task!r} is pinned to GPU model {model!r} (its timings so far were measured there), "
                f"but this GPU is {device!r}. Timings are never compared across GPU models: run this task "
                f"on a {model!r} or start a new run.")

    def _busy_alive_s(self) -> tuple[float, float]:
        """Seconds spent evaluating and seconds since the evaluator was ready (0, 0 before)."""
        with self._lock:
            if self._ready_at is None:
                return 0.0, 0.0
            now = self._stopped_at or time.monotonic()
            busy = self._busy_s + (now - self._busy_since if self._busy_since is not None else 0.0)
            return busy, now - self._ready_at

    # --- the worker thread ------------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fsr-local-evaluator", daemon=True)
            self._thread.start()

    def _unavailable(self) -> str:
        """Why nothing can be asked of the evaluator (its build failed, its machinery did), or ""."""
        try:
            self._raise_if_unavailable()
        except EvaluatorUnavailable as e:
            return str(e)
        return ""

    def _raise_if_unavailable(self) -> None:
        if self._build_error is not None:
            raise EvaluatorUnavailable(f"the evaluator could not be built: {self._build_error}") \
                from self._build_error
        if self._fault is not None:
            raise EvaluatorUnavailable(f"the evaluator failed (fsr's own fault, not a verdict on the kernel): "
                                       f"{' '.join(str(self._fault).split())}") from self._fault

    def _run(self) -> None:
        try:
            self._evaluator = self._factory()
            self._device = self._evaluator.device()
        except BaseException as e:  # reported to the caller by poll/submit, not lost in a thread
            log.debug("building the evaluator failed: %s", e)  # the caller says it, once
            self._build_error = e
            self._built.set()
            return
        with self._lock:
            self._ready_at = time.monotonic()
        self._built.set()
        try:
            while (candidate := self._inbox.get()) is not None:
                if isinstance(candidate, _Compare):
                    self._compare(self._evaluator, candidate)
                    continue
                try:
                    self._outbox.put(self._evaluate(self._evaluator, candidate))
                except EvaluatorFault as e:  # no verdict: the run stops with the reason (poll, submit)
                    log.error("evaluator failed on candidate %s: %s", candidate.id, e)
                    self._fault = e
                    break
        finally:
            with self._lock:
                self._stopped_at = time.monotonic()
            self._refuse_compares(self._unavailable() or "the worker stopped")
            self._evaluator.close()

    def _refuse_compares(self, why: str) -> None:
        """Answer the `compare` requests still queued when the worker thread ends with `why`."""
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Compare) and item.answer.set_running_or_notify_cancel():
                item.answer.set_exception(EvaluatorUnavailable(why))

    @staticmethod
    def _compare(evaluator: Evaluator, request: _Compare) -> None:
        """Answer a `compare` request (not an evaluation: no counters move)."""
        if not request.answer.set_running_or_notify_cancel():
            return  # the caller stopped waiting
        try:
            request.answer.set_result(evaluator.compare(request.tasks, request.wait_s))
        except Exception as e:  # the caller says it, as fsr's fault
            log.error("timing the comparators of %s failed: %s", ", ".join(request.tasks), e)
            request.answer.set_exception(e)

    def _evaluate(self, evaluator: Evaluator, candidate: Candidate) -> Evaluation:
        with self._lock:
            self._busy_since = time.monotonic()
        try:
            evaluation = replace(evaluator.evaluate(candidate), worker=WORKER_NAME)
            with self._lock:
                self._setup_s += evaluation.setup_s
            return evaluation
        except EvaluatorFault:
            raise
        except Exception as e:
            # The protocol says evaluate never raises; if it does, that is an evaluator bug, and
            # the search must stay total: the candidate gets CRASH with the reason, loudly logged.
            log.exception("evaluator raised on candidate %s", candidate.id)
            device = self._device.name if self._device else ""
            with self._lock:
                self._crashes += 1
            return replace(crash_evaluation(candidate, f"evaluator raised {type(e).__name__}: {e}", device),
                           worker=WORKER_NAME)
        finally:
            with self._lock:
                self._evaluations += 1
                assert self._busy_since is not None
                self._busy_s += time.monotonic() - self._busy_since
                self._busy_since = None
