"""The GPU tests over every visible GPU: under pytest-xdist, `-n auto` starts one worker per visible
GPU, and each worker sees one of them alone (CUDA_VISIBLE_DEVICES set from its worker id before
anything in it starts CUDA), so the evaluators of one worker never share a GPU with another's.
Pure functions of the environment: tests/conftest.py applies them."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from fsr.evaluate import host

WORKER_ID = re.compile(r"^gw(\d+)$")  # pytest-xdist names its workers gw0, gw1, ...
SHARERS_ENV = "FSR_TEST_GPU_SHARERS"  # set in a worker: how many workers use its GPU


def auto_workers(gpus: int) -> int | None:
    """How many workers `-n auto` starts: one per visible GPU; None (pytest-xdist's own count, the
    CPU cores) on a machine without one, where only CPU tests run."""
    return gpus if gpus > 0 else None


def visible_devices(environ: Mapping[str, str], count: int) -> list[str]:
    """The devices this process may use, named as CUDA_VISIBLE_DEVICES names them: its entries where
    it is set (indices or UUIDs), else 0 .. count - 1."""
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip()]
    return [str(i) for i in range(count)]


def worker_device(worker_id: str, devices: list[str]) -> str | None:
    """The one device worker `worker_id` uses: the workers take the devices in turn (more workers
    than devices share them); None outside a worker or without a device."""
    match = WORKER_ID.match(worker_id)
    if match is None or not devices:
        return None
    return devices[int(match.group(1)) % len(devices)]


def worker_count(environ: Mapping[str, str]) -> int:
    """How many pytest-xdist workers run this session (1 without xdist)."""
    try:
        return max(1, int(environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        return 1


def host_threads(environ: Mapping[str, str] = os.environ, cores: int | None = None) -> int:
    """The host threads a test's GPU child may use (EvalConfig.host_threads): this worker's share
    of the cores under pytest-xdist, so the workers' float64 references do not each take every
    core; 0 (every core, fsr's default) without xdist."""
    workers = worker_count(environ)
    if workers == 1:
        return 0
    return max(1, (cores or host.cores()) // workers)


def sharers(worker_id: str, workers: int, devices: list[str]) -> int:
    """How many of the session's `workers` use the device worker `worker_id` uses (itself
    included): 1 outside a worker or where each worker has a device of its own."""
    mine = worker_device(worker_id, devices)
    if mine is None:
        return 1
    return max(1, sum(worker_device(f"gw{i}", devices) == mine for i in range(workers)))


def device_budget(total_bytes: int, share: int, fraction: float = 0.65) -> int:
    """`eval.prepared_max_bytes` for a GPU child of a worker that shares its device with
    `share - 1` others: their part of the `fraction` a child keeps alone (0, the child's own
    default, where the device is not shared or its size is unknown)."""
    if share <= 1 or total_bytes <= 0:
        return 0
    return int(total_bytes * fraction / share)
