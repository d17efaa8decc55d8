"""The comparators' record of a GPU evaluator (fsr.evaluate.evaluator.GpuEvaluator, whose part this
is): each task's library, PyTorch eager and torch.compile figures as its GPU child times them,
before a task's first candidate or beside its first candidates, and `compare`, which answers for
tasks' comparators after a campaign's last evaluation (Evaluator.compare): those timed beside
candidates come from this record; those still being timed (or never asked of the current GPU
child) are asked and waited for, within the caller's bound."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from fsr import tasks
from fsr.evaluate import READY_TIMEOUT_S
from fsr.evaluate.sandbox import Sandbox
from fsr.evaluate.turns import Turns
from fsr.evaluate.wire import Died, Faulted, TimedOut
from fsr.execute.base import BOUND_RAN_OUT
from fsr.types import Comparison, EvaluatorFault, Task

log = logging.getLogger("fsr.evaluate.evaluator")  # one logger for the evaluator and its record

COMPARE_POLL_S = 0.1  # how often `compare` asks the GPU child for comparators still being timed


@dataclass
class TaskTimes:
    """A task's baseline and comparator times, as this evaluator knows them."""

    baseline_us: float | None  # None: the task has no baseline.cu (one made by `fsr import`)
    library_us: float | None
    torch_us: float | None = None
    torch_compile_us: float | None = None
    torch_compile_s: float | None = None



class ComparatorRecord:
    """GpuEvaluator's comparator figures and `compare`: the state is set up by GpuEvaluator's
    `__init__`, which also provides `_task` and `_prepare`."""

    sandbox: Sandbox
    _gpu: Turns
    _times: dict[str, TaskTimes]
    _prepared_in: dict[str, int]
    _beside: bool
    _compared: set[str]
    _missed: dict[str, tuple[str, ...]]
    _asked: dict[str, int]
    _owed_s: float
    _owed_lock: threading.Lock

    def _task(self, name: str) -> Task:
        raise NotImplementedError

    def _prepare(self, task: Task) -> TaskTimes:
        raise NotImplementedError

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        """The comparators of `tasks` (Evaluator.compare): a task whose comparators this evaluator
        timed (or found failing) is answered from that record; another is prepared in the GPU
        child, which is asked to time them if it was not already, and waited for, one task after
        another, until `wait_s` has passed. A failure of fsr's own machinery leaves that task's
        figures out with the reason (`left`), never a verdict; the next task is tried."""
        deadline = time.perf_counter() + wait_s
        recorded = {name for name in tasks if self._compared_known(name)}  # answered, not timed for this
        return [replace(c, fresh=c.task not in recorded) for c in (self._compare_one(n, deadline) for n in tasks)]

    def _take_compared(self, task: Task) -> TaskTimes:
        """The task's times, with the comparators the child timed beside candidates since the
        last call merged in (their GPU seconds owed to the next evaluation); the caller holds
        the GPU lock."""
        for c in self.sandbox.compared:
            if c.task in self._times:
                self._times[c.task] = replace(self._times[c.task], library_us=c.library_us, torch_us=c.torch_us,
                                              torch_compile_us=c.torch_compile_us,
                                              torch_compile_s=c.torch_compile_s)
            self._compared.add(c.task)
            self._missed[c.task] = c.missed
            with self._owed_lock:
                self._owed_s += c.gpu_s
            for line in c.missed:
                log.warning("task %s: %s", c.task, line)
        self.sandbox.compared.clear()
        return self._times[task.name]

    def _compare_one(self, name: str, deadline: float) -> Comparison:
        """One task's Comparison (`compare`), waiting until `deadline` (perf_counter) at most."""
        try:
            task = self._task(name)
        except tasks.TaskError as e:
            return Comparison(name, left=str(e))
        known = self._compared_known(name)
        try:
            while not known:
                if time.perf_counter() >= deadline:
                    return Comparison(name, self.sandbox.device.name if self.sandbox.device else "",
                                      left=BOUND_RAN_OUT)
                known = self._compare_step(task)
                if not known:
                    time.sleep(COMPARE_POLL_S)
        except Exception as e:  # fsr's own (the child, the task's preparation): no verdict, the figures left out
            log.warning("task %s: comparators not timed: %s: %s", name, type(e).__name__, e)
            return Comparison(name, self.sandbox.device.name if self.sandbox.device else "",
                              left=f"fsr's own fault while timing them: {' '.join(str(e).split())[:300]}")
        times = self._times[name]
        return Comparison(name, self.sandbox.device.name if self.sandbox.device else "", times.library_us,
                          times.torch_us, times.torch_compile_us, times.torch_compile_s,
                          self._missed.get(name, ()))

    def _compare_step(self, task: Task) -> bool:
        """One step towards `task`'s comparators: its host contents asked for, the task prepared
        in the GPU child (which asks for its comparators where this child was not asked yet), or
        the figures finished since asked for; whether they are known now."""
        with self._gpu:
            self.sandbox.ensure_started()
            if self._prepared_in.get(task.name) != self.sandbox.restarts:
                if self.sandbox.call("ready", task.name, READY_TIMEOUT_S) is False:
                    return False  # its inputs and references are being built: asked again soon
                self._prepare(task)
            else:
                reply = self.sandbox.call("ready", task.name, READY_TIMEOUT_S)  # the figures come before it
                if isinstance(reply, (Died, Faulted, TimedOut)):
                    raise EvaluatorFault(f"the GPU child failed while the comparators were timed: {reply}")
            self._take_compared(task)
        return self._compared_known(task.name)

    def _compared_known(self, name: str) -> bool:
        """Whether this evaluator holds the task's comparator figures (or knows them failed)."""
        return name in self._times and (name in self._compared or not self._beside)

    def _comparators(self, task: Task) -> str:
        """What the next preparation of `task` asks of its comparators: "now", "beside" or ""."""
        if not self._beside:
            return "now" if task.name not in self._times else ""  # timed once per evaluator
        if task.name in self._compared or self._asked.get(task.name) == self.sandbox.restarts:
            return ""  # timed, or asked of this child already
        self._asked[task.name] = self.sandbox.restarts
        return "beside"
