"""The GPU worker's share of its node's CPUs (for the GPU child's float64 references)."""

from __future__ import annotations

import pytest
import ray

from cluster.worker import cpu_share, host_share
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
