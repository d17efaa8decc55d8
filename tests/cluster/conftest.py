"""One local two-node Ray cluster for the tests of this folder (started afresh if a test leaves a
fake GPU held): two fake GPUs and one CPU per node. It is shut down when the folder's last test is
done, so its dozen idle processes do not share a two-core CI machine with the rest of the suite.

Ray's fake GPUs are plain resources, so actors requesting `num_gpus=1` are scheduled exactly as
on real GPUs (with CUDA_VISIBLE_DEVICES set), and nothing touches a device.
"""

from __future__ import annotations

import os
import time
import warnings
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
# How long a test waits for the previous test's actors to give their fake GPUs back before the
# cluster is started afresh. Ray can keep an actor's resources when it is killed while its
# constructor runs (ray-project/ray#27743); a restart costs seconds, a leaked GPU every later test.
GPU_RETURN_WAIT_S = float(os.environ.get("FSR_TEST_GPU_RETURN_WAIT_S", "60"))


def _start_cluster() -> Cluster:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "num_gpus": GPUS_PER_NODE, "include_dashboard": False})
    for _ in range(NODES - 1):
        cluster.add_node(num_cpus=1, num_gpus=GPUS_PER_NODE)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, include_dashboard=False)
    return cluster


def _stop_cluster(cluster: Cluster) -> None:
    ray.shutdown()
    cluster.shutdown()


def _free_gpus(wait_s: float) -> float:
    deadline = time.monotonic() + wait_s
    while ray.available_resources().get("GPU", 0) < NODES * GPUS_PER_NODE and time.monotonic() < deadline:
        time.sleep(0.2)
    return float(ray.available_resources().get("GPU", 0))


class _Session:
    cluster: Cluster | None = None


@pytest.fixture(scope="package")
def _ray_session() -> Iterator[type[_Session]]:
    try:
        yield _Session
    finally:
        if _Session.cluster is not None:
            _stop_cluster(_Session.cluster)
            _Session.cluster = None


@pytest.fixture
def ray_cluster(_ray_session: type[_Session]) -> Cluster:
    """The folder's cluster with every fake GPU free. Actors killed by the previous test release
    their GPUs asynchronously, and a worker that cannot get one would sit pending through the test;
    when they do not come back (or a node is gone), the cluster is started afresh, with a warning."""
    if _ray_session.cluster is None:
        _ray_session.cluster = _start_cluster()
        return _ray_session.cluster
    free = _free_gpus(GPU_RETURN_WAIT_S)
    if free < NODES * GPUS_PER_NODE:
        alive = sum(n["Alive"] for n in ray.nodes())
        warnings.warn(f"{free:g} of {NODES * GPUS_PER_NODE} fake GPUs free after {GPU_RETURN_WAIT_S:g} s "
                      f"({alive} nodes alive): Ray cluster restarted", stacklevel=1)
        _stop_cluster(_ray_session.cluster)
        _ray_session.cluster = None
        _ray_session.cluster = _start_cluster()
        if _free_gpus(RAY_WAIT_S) < NODES * GPUS_PER_NODE:
            pytest.fail(f"a fresh cluster has {ray.available_resources().get('GPU', 0):g} of "
                        f"{NODES * GPUS_PER_NODE} fake GPUs free")
    return _ray_session.cluster


@pytest.fixture
def fresh_ray_cluster(_ray_session: type[_Session]) -> Cluster:
    """A cluster started afresh, for a test that needs every fake GPU to get a worker. An actor
    that an earlier test's executor killed while Ray was still placing it can be placed anyway
    and hold its GPU until the cluster goes (ray-project/ray#27743); the check that every GPU is
    free can pass just before that happens."""
    if _ray_session.cluster is not None:
        _stop_cluster(_ray_session.cluster)
        _ray_session.cluster = None
    _ray_session.cluster = _start_cluster()
    return _ray_session.cluster


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
