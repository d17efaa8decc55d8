"""The GPU worker's share of its node's CPUs (for the GPU child's float64 references), and the
campaign spec it builds its evaluator from."""

from __future__ import annotations

import pytest
import ray

from cluster.worker import _build_gpu_evaluator, cpu_share, host_share
from fsr import tasks
from fsr.types import WorkerSpec
from tests.cluster.conftest import RAY_WAIT_S

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("ray_cluster")]


@pytest.mark.parametrize("cpus,gpus,share", [(32, 2, 16), (128, 8, 16), (16, 3, 5), (1, 2, 1), (8, 0, 8)])
def test_cpu_share_is_cpus_per_gpu_and_at_least_one(cpus, gpus, share):
    assert cpu_share(cpus, gpus) == share


@ray.remote(num_gpus=1, num_cpus=0)
def _share_in_actor() -> int | None:
    return host_share()


def test_worker_on_a_node_reads_its_own_nodes_resources():
    # every node of the test cluster has 1 CPU and 2 GPUs
    assert ray.get(_share_in_actor.remote(), timeout=RAY_WAIT_S) == 1


@ray.remote(num_gpus=1, num_cpus=0)
def _spec_in_actor(spec: WorkerSpec) -> tuple[int, str | None, tuple[str, ...]]:
    from fsr.evaluate.evaluator import GpuEvaluator

    evaluator = _build_gpu_evaluator(spec)  # no GPU needed until the first evaluation
    assert isinstance(evaluator, GpuEvaluator)
    try:
        return evaluator.spec.host_threads, evaluator.spec.journal_dir, tuple(t.name for t in evaluator.spec.tasks)
    finally:
        evaluator.close()


def test_a_worker_takes_the_drivers_spec_and_fills_in_what_its_node_decides(tmp_path):
    """Threads: the node's share unless the spec sets them; a journal folder it cannot create is
    dropped rather than failing the worker; the tasks are the driver's."""
    softmax = tasks.load("softmax")
    journal = tmp_path / "run"
    got = ray.get(_spec_in_actor.remote(WorkerSpec((softmax,), journal_dir=str(journal))), timeout=RAY_WAIT_S)
    assert got == (1, str(journal), ("softmax",)) and journal.is_dir()
    got = ray.get(_spec_in_actor.remote(WorkerSpec((softmax,), host_threads=3, journal_dir="/proc/no-such/run")),
                  timeout=RAY_WAIT_S)
    assert got == (3, None, ("softmax",))
