"""Connecting to Ray: an embedded local instance by default, or an existing cluster.

`connect(None, ...)` starts Ray on this machine with every local GPU (or `num_gpus` of them) and
nothing else: no dashboard, driver logs off unless asked. `connect("auto")`, `connect("host:port")`
or `connect("ray://host:10001")` joins a cluster started with `ray up ray_config.yaml` or
`ray start`; an unreachable address is reported in one line instead of Ray's endless retries.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import ray

from cluster.ray_output import route_ray_output

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PROBE_TIMEOUT_S = 5.0
# What is never shipped to workers: run outputs can be large, the rest is not code.
SHIP_EXCLUDES = ["runs/", ".git/", "**/__pycache__/", "*.egg-info/", ".venv/", ".mypy_cache/",
                 ".ruff_cache/", ".pytest_cache/", ".devdeps/", ".whl/"]


class ClusterError(RuntimeError):
    """Ray could not be started or reached; the message is one line for the command line."""


def connect(address: str | None = None, num_gpus: int | None = None, *, log_to_driver: bool = False,
            ship_code: bool = True, ray_log: str | Path | None = None) -> None:
    """Start or join Ray once per process (a second call is a no-op).

    address: None for an embedded instance on this machine; "auto", "host:port" or
      "ray://host:port" to join a running cluster.
    num_gpus: GPUs the embedded instance declares (None = every GPU Ray detects here). A cluster
      declares its own GPUs at `ray start`, so with an address this is ignored.
    log_to_driver: forward the workers' stdout/stderr to this process.
    ship_code: when joining a cluster, upload this project as the job's working_dir (see below).
    ray_log: a file for Ray's own output (its logger, the errors it publishes to drivers such as
      a lost node's raylet log) and fsr's cluster log, which then stay out of the terminal.
    """
    if ray.is_initialized():
        log.debug("Ray already initialised; connect() does nothing")
        return
    if ray_log is not None:
        route_ray_output(ray_log)
    try:
        _init(address, num_gpus, log_to_driver, ship_code)
    finally:
        if ray_log is not None:
            route_ray_output(ray_log)  # ray.init sets up its logger again


def _init(address: str | None, num_gpus: int | None, log_to_driver: bool, ship_code: bool) -> None:
    options: dict[str, Any] = dict(include_dashboard=False, log_to_driver=log_to_driver,
                                   logging_level=logging.WARNING)
    if address is None:
        try:
            # "local", not None: None would join whatever RAY_ADDRESS or a `ray start` on this
            # machine points at, and a campaign would silently run somewhere else.
            ray.init(address="local", num_gpus=num_gpus, **options)
        except Exception as e:
            raise ClusterError(f"could not start a local Ray instance: {_one_line(e)}") from e
        return
    if num_gpus is not None:
        log.warning("num_gpus=%d ignored: a cluster's GPUs are declared by `ray start`", num_gpus)
    target = _resolve(address)
    _probe(address, target)
    if ship_code:
        # Trade-off: working_dir uploads the project (a few hundred kB without runs/ and .git)
        # to the cluster on every connect and each node unpacks it before its first worker
        # starts. In exchange, every worker imports exactly the driver's fsr and tasks, with no
        # redeploy and no version drift between nodes. Dependencies (CuPy, NVRTC, Optuna) are
        # not shipped: ray_config.yaml's setup_commands install them once per node. With
        # ship_code=False the nodes' own `pip install -e .` checkout is used instead: nothing
        # to upload, but the nodes must be kept at the driver's commit by hand.
        options["runtime_env"] = {"working_dir": str(PROJECT_ROOT), "excludes": SHIP_EXCLUDES}
    try:
        ray.init(address=target, **options)
    except Exception as e:
        raise ClusterError(f"could not join the Ray cluster at {address!r}: {_one_line(e)}") from e


def disconnect() -> None:
    """Shut down the embedded instance, or leave the cluster (its nodes keep running)."""
    ray.shutdown()


def _resolve(address: str) -> str:
    """Turn "auto" into the host:port of the cluster last started here (or RAY_ADDRESS)."""
    if address != "auto":
        return address
    try:
        from ray._private.services import canonicalize_bootstrap_address_or_die
    except ImportError:  # private API moved: let ray.init resolve "auto" itself
        return address
    try:
        return str(canonicalize_bootstrap_address_or_die("auto"))
    except ConnectionError as e:
        raise ClusterError(f"--address auto: no running Ray cluster found on this machine "
                           f"({_one_line(e)}); start one with `ray start --head` or "
                           f"`ray up ray_config.yaml`, or leave out --address to run locally") from None


def _probe(address: str, target: str) -> None:
    """Fail in seconds on an unreachable head: ray.init would otherwise retry for minutes."""
    hostport = target.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"cannot parse Ray address {address!r}: expected host:port, "
                           f"ray://host:port or auto")
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as e:
        raise ClusterError(f"cannot reach the Ray head at {hostport} ({e.strerror or e}); is "
                           f"`ray start --head` running there and the port open?") from None


def _one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"
