"""A GpuEvaluator whose GPU child is a stand-in: its requests are answered on the host, counted by
kind, so the worker's side of the evaluator (static stage, judgements kept, certification requests)
is tested without a GPU."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from fsr.config import Config, TuneConfig
from fsr.evaluate.compile import CompileService
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.evaluate.wire import ChildResult, Prepared
from fsr.types import DeviceInfo, Task, Verdict, WorkerSpec

DEVICE = DeviceInfo(name="stub H200", arch="sm_90", copy_gbps=4000.0, read_gbps=4500.0, sgemm_tflops=50.0)


class StubSandbox:
    """What GpuEvaluator asks of its Sandbox; `answer(kind, payload)` replies to "evaluate" and
    "certify" (default: OK, timed at about 1 ms)."""

    def __init__(self, answer: Callable[[str, Any], Any] | None = None):
        self.device: DeviceInfo | None = None
        self.restarts = 0
        self.compared: list[Any] = []
        self.calls: Counter[str] = Counter()
        self.payloads: list[tuple[str, Any]] = []
        self.answer = answer or (lambda kind, payload: ChildResult(Verdict.OK, samples_us=(1000.0, 1020.0, 990.0)))

    def ensure_started(self) -> DeviceInfo:
        self.device = DEVICE
        return DEVICE

    def call(self, kind: str, payload: Any, timeout_s: float) -> Any:
        self.calls[kind] += 1
        self.payloads.append((kind, payload))
        if kind in ("ready", "fresh"):
            return True
        if kind == "prepare":
            return Prepared(library_us=None)
        return self.answer(kind, payload)

    def close(self) -> None:
        pass


def stub_evaluator(task: Task, compiler: CompileService, sandbox: StubSandbox, trials: int = 0,
                   config: Config | None = None, campaign: bool = True) -> GpuEvaluator:
    """A campaign worker's GpuEvaluator of `task` (`campaign`: judgements kept, timing raced) on `sandbox`,
    compiling with `compiler` (its own, closed with it)."""
    config = config or Config(tune=TuneConfig(trials=trials))
    evaluator = GpuEvaluator(WorkerSpec.of(config, [task]), compiler=compiler, campaign=campaign)
    evaluator.sandbox = sandbox  # type: ignore[assignment]  # the stand-in answers what the Sandbox would
    return evaluator
