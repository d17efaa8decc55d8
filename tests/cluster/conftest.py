"""One local two-node Ray cluster for the whole session: two fake GPUs and one CPU per node.

Ray's fake GPUs are plain resources, so actors requesting `num_gpus=1` are scheduled exactly as
on real GPUs (with CUDA_VISIBLE_DEVICES set), and nothing touches a device.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError:  # the cluster tests need Ray; everything else runs without it
    collect_ignore_glob = ["test_*.py"]

NODES = 2
GPUS_PER_NODE = 2
# How long a test waits for Ray to start or place something (a worker, an actor, a GPU freed by the
# previous test). A few seconds on an idle machine; on a loaded two-core CI machine, starting four
# worker processes at once has taken over a minute. Waits end as soon as the thing happens, so a
# generous bound costs nothing when all is well.
RAY_WAIT_S = float(os.environ.get("FSR_TEST_RAY_WAIT_S", "300"))


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Cluster]:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "num_gpus": GPUS_PER_NODE, "include_dashboard": False})
    for _ in range(NODES - 1):
        cluster.add_node(num_cpus=1, num_gpus=GPUS_PER_NODE)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, include_dashboard=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


_gpus_lost = False  # set once the GPUs did not come back: later tests then wait only briefly


@pytest.fixture(autouse=True)
def gpus_released() -> Iterator[None]:
    """Start each test with every fake GPU free: actors killed by the previous test release their
    GPUs asynchronously, and a worker that cannot get one would sit pending through the test. If
    they do not come back, the test fails saying so (not later, in a misleading way); after that,
    later tests wait seconds, not minutes, so a broken cluster cannot stretch CI by hours."""
    global _gpus_lost
    if ray.is_initialized():
        deadline = time.monotonic() + (min(10.0, RAY_WAIT_S) if _gpus_lost else RAY_WAIT_S)
        while (ray.available_resources().get("GPU", 0) < NODES * GPUS_PER_NODE
               and time.monotonic() < deadline):
            time.sleep(0.2)
        free = ray.available_resources().get("GPU", 0)
        if free < NODES * GPUS_PER_NODE:
            _gpus_lost = True
            alive = sum(n["Alive"] for n in ray.nodes())
            pytest.fail(f"{free:g} of {NODES * GPUS_PER_NODE} fake GPUs free before the test "
                        f"({alive} nodes alive; cluster {ray.cluster_resources()})")
    yield


def collect(ex: Any, count: int, timeout_s: float = RAY_WAIT_S) -> list[Any]:
    """Poll a RayExecutor until `count` evaluations came back; fail if they do not in time."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        out += ex.poll(1.0)
    assert len(out) == count, f"{len(out)} of {count} evaluations came back"
    return out


@pytest.fixture
def make() -> Iterator[Callable[..., Any]]:
    """Builds RayExecutors (test evaluators by default) and closes them after the test."""
    from cluster.executor import RayExecutor
    from cluster.testing import MarkedEvaluatorFactory

    made: list[RayExecutor] = []

    def build(cls: type[RayExecutor] = RayExecutor, **kwargs: Any) -> RayExecutor:
        kwargs.setdefault("evaluator_factory", MarkedEvaluatorFactory())
        made.append(cls(**kwargs))
        return made[-1]

    yield build
    for ex in made:
        ex.close()
