"""Test evaluators for the Ray layer, for tests/cluster and bench/: fixed latency, a GPU model
chosen per fake GPU, and candidates marked to kill their worker process, to hang it, to make the
evaluator raise, or to take a while (so a test can kill the worker under it). Every evaluation's
message names the worker's process id. Their comparators (`compare`) are timed when asked: PyTorch
eager at TORCH_US; a task named with EXIT_TASK kills the worker process meanwhile.

They run inside Ray actors, so everything here must be importable by the workers and picklable.
The factory asks Ray which GPU its worker holds: that is why this lives in cluster/, not in
fsr.testing (fsr never imports ray).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from fsr.testing.fakes import FakeEvaluator, softmax_variants
from fsr.types import Candidate, Comparison, DeviceInfo, Evaluation

EXIT_MARK = "// fsr-test: exit the worker process"
HANG_MARK = "// fsr-test: hang"
RAISE_MARK = "// fsr-test: raise"
SLOW_MARK = "// fsr-test: slow"
SLOW_S = 2.0
TORCH_US = 250.0
EXIT_TASK = "fsr-test-exit"


def candidates(count: int, task: str | None = None, mark: str = "") -> list[Candidate]:
    """`count` distinct candidates (the softmax baseline with a numbered comment), optionally
    renamed to another task (tasks are only labels to these evaluators) and marked."""
    base = softmax_variants(1)[0]
    out = [replace(base, source=f"{base.source}\n// variant {i} {task or ''}\n{mark}\n") for i in range(count)]
    return [replace(c, task=task) for c in out] if task else out


@dataclass
class MarkedEvaluator:
    """FakeEvaluator with a fixed latency, a device name, and the fault markers. Like the GPU
    evaluator, it takes calls from two actor threads and does their "GPU work" (the markers and
    the latency) one at a time."""

    latency_s: float
    device_name: str
    effects: tuple[tuple[str, float], ...] = ()  # feature -> speed factor of the reported timing

    def __post_init__(self) -> None:
        self.inner = FakeEvaluator(effects=dict(self.effects)) if self.effects else FakeEvaluator(fixed_us=100.0)
        self.gpu = threading.Lock()

    def evaluate(self, candidate: Candidate) -> Evaluation:
        with self.gpu:
            if EXIT_MARK in candidate.source:
                os._exit(3)  # what a segfaulting CUDA driver looks like from Ray
            if HANG_MARK in candidate.source:
                time.sleep(3600)
            if RAISE_MARK in candidate.source:
                raise RuntimeError("evaluator bug")
            time.sleep(SLOW_S if SLOW_MARK in candidate.source else self.latency_s)
        return replace(self.inner.evaluate(candidate), device=self.device_name,
                       message=f"evaluated in process {os.getpid()}")

    def device(self) -> DeviceInfo:
        return DeviceInfo(name=self.device_name, arch="sm_90")

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        with self.gpu:
            if any(EXIT_TASK in t for t in tasks):
                os._exit(3)
            return [Comparison(t, self.device_name, torch_us=TORCH_US, fresh=True) for t in tasks]

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class MarkedEvaluatorFactory:
    """Builds a MarkedEvaluator in the worker; with several models, the model is picked by the
    worker's (fake) GPU index, so each node of the test cluster has one GPU of each."""

    latency_s: float = 0.05
    models: tuple[str, ...] = ("FakeGPU",)
    effects: tuple[tuple[str, float], ...] = ()

    def __call__(self) -> MarkedEvaluator:
        import ray

        gpu_ids = ray.get_runtime_context().get_accelerator_ids().get("GPU", []) if ray.is_initialized() else []
        index = int(gpu_ids[0]) if gpu_ids else 0
        return MarkedEvaluator(self.latency_s, self.models[index % len(self.models)], self.effects)


@dataclass(frozen=True)
class FailOnceEvaluatorFactory:
    """Raises the first time it is called in any worker (a file at `flag` remembers it across
    processes), as a worker whose GPU child fails to start once; then builds a MarkedEvaluator."""

    flag: str
    latency_s: float = 0.01

    def __call__(self) -> MarkedEvaluator:
        try:
            with open(self.flag, "x"):
                pass
        except FileExistsError:
            return MarkedEvaluatorFactory(self.latency_s)()
        raise RuntimeError("fsr-test: this worker fails to start once")


@dataclass
class PreparingEvaluator:
    """A GPU worker that holds at most `capacity` prepared tasks (the least recently used dropped)
    and pays `prepare_s` to prepare one it does not hold: what re-preparing costs a campaign is
    read off the evaluations (`setup_s` > 0 where a preparation was paid)."""

    capacity: int
    prepare_s: float
    latency_s: float

    def __post_init__(self) -> None:
        self.inner = FakeEvaluator(fixed_us=100.0)
        self.gpu = threading.Lock()
        self.held: list[str] = []

    def evaluate(self, candidate: Candidate) -> Evaluation:
        with self.gpu:
            setup_s = 0.0
            if candidate.task in self.held:
                self.held.remove(candidate.task)
            else:
                time.sleep(self.prepare_s)
                setup_s = self.prepare_s
                del self.held[:max(0, len(self.held) - self.capacity + 1)]
            self.held.append(candidate.task)
            time.sleep(self.latency_s)
        return replace(self.inner.evaluate(candidate), device="FakeGPU", setup_s=setup_s)

    def device(self) -> DeviceInfo:
        return DeviceInfo(name="FakeGPU", arch="sm_90")

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        return [Comparison(t, "FakeGPU", torch_us=TORCH_US, fresh=True) for t in tasks]

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class PreparingEvaluatorFactory:
    """Builds a PreparingEvaluator in the worker."""

    capacity: int = 3
    prepare_s: float = 0.05
    latency_s: float = 0.01

    def __call__(self) -> PreparingEvaluator:
        return PreparingEvaluator(self.capacity, self.prepare_s, self.latency_s)
