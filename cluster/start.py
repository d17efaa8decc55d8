"""Connecting to Ray: an embedded local instance by default, or an existing cluster.

`connect(None, ...)` starts Ray on this machine with every local GPU (or `num_gpus` of them) and
nothing else: no dashboard, driver logs off unless asked. `connect("auto")`, `connect("host:port")`
or `connect("ray://host:10001")` joins a cluster started with `ray up ray_config.yaml` or
`ray start`; an unreachable address, or a cluster that refuses this machine's auth token, is
reported in one line instead of Ray's endless retries.

Secrets stay with the driver: the embedded Ray is started without the variables that hold
credentials (cluster.auth.secret_names), so no worker sees a model's API key; a cluster's
workers get the environment of their own node's `ray start`, never the driver's.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import socket
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import ray

from cluster import auth, processes, ray_compat
from cluster.ray_output import route_ray_output

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0
# The packages a worker imports, shipped from wherever this process imported them (a checkout
# or site-packages). A harness whose evaluators live elsewhere adds its package here.
SHIPPED_PACKAGES: tuple[str, ...] = ("fsr", "cluster")
SHIP_EXCLUDES = ["**/__pycache__/", "*.pyc"]


# The processes the embedded Ray started (direct children of this one), stopped at exit: this
# hook is registered after Ray's own, so it runs first, while their tree is still whole.
_embedded: set[int] = set()


class ClusterError(RuntimeError):
    """Ray could not be started or reached; the message is one line for the command line."""


def connect(address: str | None = None, num_gpus: int | None = None, *, log_to_driver: bool = False,
            ship_code: bool = True, ray_log: str | Path | None = None, secrets: Collection[str] = ()) -> None:
    """Start or join Ray once per process (a second call is a no-op).

    address: None for an embedded instance on this machine; "auto", "host:port" or
      "ray://host:port" to join a running cluster.
    num_gpus: GPUs the embedded instance declares (None = every GPU Ray detects here). A cluster
      declares its own GPUs at `ray start`, so with an address this is ignored.
    log_to_driver: forward the workers' stdout/stderr to this process.
    ship_code: when joining a cluster, upload the imported fsr and cluster packages (and the
      tasks) with the job (see `ship_env`).
    ray_log: a file for Ray's own output (its logger, the errors it publishes to drivers such as
      a lost node's raylet log) and fsr's cluster log, which then stay out of the terminal.
    secrets: environment variables the embedded Ray's processes must not inherit, on top of
      those named like credentials (e.g. llm.api_key_env when it is not).
    """
    if ray.is_initialized():
        log.debug("Ray already initialised; connect() does nothing")
        return
    if ray_log is not None:
        route_ray_output(ray_log)
    options: dict[str, Any] = dict(include_dashboard=False, log_to_driver=log_to_driver,
                                   logging_level=logging.WARNING)
    try:
        if address is None:
            _start_embedded(num_gpus, options, secrets)
        else:
            _join(address, num_gpus, options, ship_code)
    finally:
        if ray_log is not None:
            route_ray_output(ray_log)  # ray.init sets up its logger again


def _start_embedded(num_gpus: int | None, options: dict[str, Any], secrets: Collection[str]) -> None:
    before = processes.children(os.getpid())
    try:
        with auth.env_without(auth.secret_names(os.environ, secrets)):
            # "local", not None: None would join whatever RAY_ADDRESS or a `ray start` on this
            # machine points at, and a campaign would silently run somewhere else.
            ray.init(address="local", num_gpus=num_gpus, **options)
    except BaseException as e:  # Ctrl-C included: a half-started Ray is stopped now, not in minutes
        _stop_tree(processes.children(os.getpid()) - before)
        if isinstance(e, Exception):
            raise ClusterError(f"could not start a local Ray instance: {_one_line(e)}") from e
        raise
    auth.restrict_token_file()
    _embedded.update(processes.children(os.getpid()) - before)


def _stop_tree(roots: set[int]) -> None:
    """Shut the embedded Ray down and stop every process it started, agents included: taken as
    one tree first, since the agents outlive a raylet stopped before them. Only roots that are
    still this process's children count (a pid of a Ray stopped earlier may have been reused)."""
    pids = processes.tree(roots & processes.children(os.getpid()))
    try:
        ray.shutdown()
    except Exception as e:  # a start cut short leaves Ray half set up
        log.debug("ray.shutdown: %s", e)
    processes.stop(processes.tree(pids))  # the agents among them: orphans now, but alive


atexit.register(lambda: _stop_tree(_embedded) if _embedded else None)


def _join(address: str, num_gpus: int | None, options: dict[str, Any], ship_code: bool) -> None:
    if num_gpus is not None:
        log.warning("num_gpus=%d ignored: a cluster's GPUs are declared by `ray start`", num_gpus)
    target = _resolve(address)
    _probe(address, target)
    refused = auth.prepare_client(address, None if target.startswith("ray://") else target)
    if refused:
        raise ClusterError(refused)
    if ship_code:
        options["runtime_env"] = ship_env()
    try:
        ray.init(address=target, **options)
    except Exception as e:
        if auth.is_refusal(e):  # the probe could not tell in advance (an older head, a ray:// address)
            raise ClusterError(auth.refusal(address, os.environ)) from e
        raise ClusterError(f"could not join the Ray cluster at {address!r}: {_one_line(e)}") from e


def ship_env() -> dict[str, Any]:
    """The job's runtime_env: the packages in SHIPPED_PACKAGES as this process imported them, in
    a folder of links that Ray uploads (what the links point to: an installed fsr ships its
    package, not site-packages). Tasks are not shipped: they travel to the workers as data, in
    the campaign's WorkerSpec. A working_dir rather than py_modules, since without one Ray puts
    the driver's own directory first on the workers' import path. Trade-off: a few hundred kB go to the cluster on every connect and each node
    unpacks them before its first worker starts; in exchange every worker imports exactly the
    driver's code, with no redeploy and no version drift between nodes. Dependencies (CuPy,
    NVRTC, Optuna) are not shipped: ray_config.yaml's setup_commands install them on each node."""
    stage = Path(tempfile.mkdtemp(prefix="fsr-ship-"))
    atexit.register(_remove_links, stage)
    for name in SHIPPED_PACKAGES:
        (stage / name).symlink_to(Path(importlib.import_module(name).__file__ or "").resolve().parent)
    return {"working_dir": str(stage), "excludes": SHIP_EXCLUDES}


def _remove_links(stage: Path) -> None:
    for link in stage.iterdir():
        link.unlink()
    stage.rmdir()


def disconnect() -> None:
    """Shut down the embedded instance (all of it), or leave the cluster (its nodes keep running)."""
    _stop_tree(_embedded)
    _embedded.clear()


def _resolve(address: str) -> str:
    """Turn "auto" into the host:port of the cluster last started here (or RAY_ADDRESS)."""
    if address != "auto":
        return address
    try:
        return ray_compat.canonical_address("auto") or address
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
