"""The GPU worker actor: one per GPU, owning one Evaluator built once in `__init__`.

Each call carries only the candidate. Ray gives the actor its GPU through
CUDA_VISIBLE_DEVICES, which the evaluator's child process inherits, so the CUDA work of this
worker can only ever touch its own device. The actor runs as many calls at once as the executor
keeps in flight (eval.calls_per_worker): the evaluator overlaps calls' host work (compiles) with
another's GPU work and runs the GPU work one call at a time.

`GpuWorker` is a plain class (usable and testable without Ray); `GpuWorkerActor` is the Ray
actor class, with resources declared by the executor at `.options()` time.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import ray

from fsr.execute.base import Evaluator
from fsr.types import Candidate, Comparison, Evaluation, WorkerInfo, WorkerSpec

EvaluatorFactory = Callable[[], Evaluator]


class GpuWorker:
    """Owns one evaluator; measures its own busy time so the driver's polling does not bias it."""

    def __init__(self, evaluator_factory: EvaluatorFactory):
        self._evaluator = evaluator_factory()
        self._device = self._evaluator.device()
        self._busy_s = 0.0
        self._lock = threading.Lock()

    def info(self) -> WorkerInfo:
        """The device and placement of this worker (the driver waits on this for readiness)."""
        if ray.is_initialized():
            ctx = ray.get_runtime_context()
            node_id, node_ip = ctx.get_node_id(), ray.util.get_node_ip_address()
            gpu_ids = tuple(str(g) for g in ctx.get_accelerator_ids().get("GPU", []))
        else:
            node_id, node_ip, gpu_ids = "", "127.0.0.1", ()
        return WorkerInfo(self._device, node_id, node_ip, gpu_ids, os.getpid())

    def evaluate(self, candidate: Candidate) -> tuple[Evaluation, float]:
        """The evaluation, and this worker's total seconds spent evaluating so far (the sum of
        its evaluations' `wall_s`: the evaluator charges overlapping calls once)."""
        start = time.perf_counter()
        try:
            evaluation = self._evaluator.evaluate(candidate)
        except BaseException:
            with self._lock:
                self._busy_s += time.perf_counter() - start
            raise
        with self._lock:  # an evaluator that leaves wall_s at 0 runs one call at a time
            self._busy_s += evaluation.wall_s or time.perf_counter() - start
            return evaluation, self._busy_s

    def compare(self, tasks: Sequence[str], wait_s: float) -> list[Comparison]:
        """The evaluator's comparators of `tasks` (Evaluator.compare): not an evaluation, so
        no busy time is counted."""
        return self._evaluator.compare(tasks, wait_s)

    def close(self) -> None:
        """Release the GPU and the evaluator's child process."""
        self._evaluator.close()


# max_restarts=0: a dead worker is replaced by the executor, not by Ray, because Ray would also
# replay the queued call that killed it.
GpuWorkerActor = ray.remote(max_restarts=0, max_task_retries=0)(GpuWorker)


def gpu_evaluator_factory(spec: WorkerSpec) -> EvaluatorFactory:
    """A picklable factory for the real GPU evaluator, built inside the actor from `spec` (the
    tasks travel in it as data, so nodes need no copy of the driver's task folders).
    `spec.journal_dir`: where tuning studies are journaled for optuna-dashboard (the run
    directory; on other nodes the same path is used if it can be created there).
    `spec.host_threads` 0: the worker's share of its node's cores (`host_share`)."""
    return functools.partial(_build_gpu_evaluator, spec)


def _build_gpu_evaluator(spec: WorkerSpec) -> Evaluator:
    from fsr.evaluate.evaluator import GpuEvaluator  # imported in the actor: CUDA lives there

    if spec.journal_dir:
        try:
            Path(spec.journal_dir).mkdir(parents=True, exist_ok=True)
        except OSError:
            spec = replace(spec, journal_dir=None)
    if not spec.host_threads:
        spec = replace(spec, host_threads=host_share() or 0)
    # a campaign's worker: comparators timed beside candidates, a program judged once
    return GpuEvaluator(spec, beside=True, campaign=True)


def host_share() -> int | None:
    """This worker's share of its node's CPUs for the GPU child's host work (one worker per GPU);
    None outside Ray or when the node is not listed."""
    if not ray.is_initialized():
        return None
    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            resources = node.get("Resources", {})
            return cpu_share(resources.get("CPU", 1.0), resources.get("GPU", 0.0))
    return None


def cpu_share(cpus: float, gpus: float) -> int:
    """CPUs per GPU of a node, at least one."""
    return max(1, int(cpus // max(1.0, gpus)))
