"""run.json: what a run directory says about itself (config with secrets scrubbed, versions,
host, command, devices, each campaign's totals, and the comparators timed after a campaign's last
evaluation), written atomically beside the lineage.

`devices` lists the GPU of each worker that served the run, as its worker measured it: CUDA's
properties and the ceilings (copy and read bandwidth, SGEMM, tensor-core rates) that the judge
and the prompts use; `fsr prompt --run` describes the card from there."""

from __future__ import annotations

import dataclasses
import json
import platform
import re
import socket
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from fsr import __version__
from fsr.files import atomic_write
from fsr.lineage import LineageError
from fsr.types import Comparison, DeviceInfo

SECRET_WORDS = ("api_key", "token", "secret")
# Names that contain a secret word but hold no secret: an environment variable's *name*, and a
# count of model tokens that the run needs for reproducibility.
NOT_SECRET = frozenset({"api_key_env", "max_tokens", "max_total_tokens", "prompt_budget_tokens"})
URL_CREDENTIALS = re.compile(r"(://)[^/@\s]+@")  # user:password@ in an endpoint URL


def _scrub(value: Any) -> Any:
    """Drop secret-named keys at any depth; strip credentials embedded in URLs."""
    if isinstance(value, Mapping):
        return {k: _scrub(v) for k, v in value.items()
                if str(k).lower() in NOT_SECRET or not any(w in str(k).lower() for w in SECRET_WORDS)}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return URL_CREDENTIALS.sub(r"\1", value) if isinstance(value, str) else value


def _versions() -> dict[str, str | None]:
    """Package versions from installed metadata: nothing is imported, so CUDA is never touched."""
    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None
    cupy_dists = metadata.packages_distributions().get("cupy", [])
    return {"fsr": __version__, "python": platform.python_version(), "numpy": version("numpy"),
            "pyarrow": version("pyarrow"), "cupy": version(cupy_dists[0]) if cupy_dists else None}


def write_run_json(run_dir: str | Path, config: Mapping[str, Any],
                   extra: Mapping[str, Any] | None = None) -> Path:
    """Write run.json atomically: config, versions, host, command line, devices, then `extra`
    (e.g. {"devices": [...]}, which the caller measured). Secret-named keys never reach it."""
    path = Path(run_dir) / "run.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"run_id": path.parent.name, "created_at": datetime.now(UTC).isoformat(),
           "hostname": socket.gethostname(), "command": list(sys.argv), "versions": _versions(),
           "devices": [], "config": dict(config), **(extra or {})}
    _write(path, doc)
    return path


def record_campaign(run_dir: str | Path, campaign: Mapping[str, Any]) -> None:
    """Append one campaign's totals (evaluations, wall seconds, the driver's ms per evaluation,
    what stopped it) to run.json's `campaigns`, one entry per start or resume of the run."""
    path = Path(run_dir) / "run.json"
    doc = read_run_json(run_dir)
    doc["campaigns"] = [*(doc.get("campaigns") or []), dict(campaign)]
    _write(path, doc)


def record_comparators(run_dir: str | Path, answers: Sequence[Comparison]) -> None:
    """Keep in run.json's `comparators` (task -> its figures, the GPU model and the worker) the
    figures of `answers` that have any: the comparators a campaign's workers timed after its last
    evaluation, which no lineage row carries (fsr.search.comparators). A task's entry replaces an
    earlier campaign's."""
    found = {c.task: {"device": c.device, "worker": c.worker, **c.figures} for c in answers if c.figures}
    if not found:
        return
    path = Path(run_dir) / "run.json"
    doc = read_run_json(run_dir)
    recorded = doc.get("comparators")
    doc["comparators"] = {**(recorded if isinstance(recorded, dict) else {}), **found}
    _write(path, doc)


def record_devices(run_dir: str | Path, devices: Mapping[str, DeviceInfo]) -> None:
    """Record each worker's GPU (`devices`: by worker name) in run.json's `devices`, replacing the
    entry of a worker of that name that an earlier campaign of the run recorded."""
    if not devices:
        return
    path = Path(run_dir) / "run.json"
    doc = read_run_json(run_dir)
    new = [{"worker": worker, **dataclasses.asdict(device)} for worker, device in devices.items()]
    kept = [d for d in doc.get("devices") or [] if not (isinstance(d, dict) and d.get("worker") in devices)]
    doc["devices"] = [*kept, *new]
    _write(path, doc)


def read_devices(run_dir: str | Path) -> list[DeviceInfo]:
    """The GPUs run.json records, as measured (LineageError where run.json is damaged)."""
    doc = read_run_json(run_dir)
    entries = doc.get("devices") or []
    fields = {f.name for f in dataclasses.fields(DeviceInfo)}
    devices = []
    for entry in entries if isinstance(entries, list) else [entries]:
        try:
            values = {k: v for k, v in entry.items() if k in fields}
            device = DeviceInfo(**values)
            ok = isinstance(device.name, str) and isinstance(device.arch, str) and all(
                isinstance(v, int | float) and not isinstance(v, bool) for k, v in values.items() if k not in ("name", "arch"))
        except (AttributeError, TypeError):
            ok = False
        if not ok:
            raise LineageError(f"{Path(run_dir) / 'run.json'} is damaged: a device entry is not a measured GPU: "
                               f"{json.dumps(entry, default=str)[:200]}")
        devices.append(device)
    return devices


def _write(path: Path, doc: Mapping[str, Any]) -> None:
    text = json.dumps(_scrub(doc), indent=2, sort_keys=True, default=str) + "\n"
    atomic_write(path, lambda f: f.write(text.encode()))


def read_run_json(run_dir: str | Path) -> dict[str, Any]:
    """The run's run.json as a dict; raises LineageError if it is missing or not a JSON object."""
    path = Path(run_dir) / "run.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise LineageError(f"{run_dir}: not a run directory (no run.json)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LineageError(f"{path} is damaged: {e}") from None
    if not isinstance(doc, dict):
        raise LineageError(f"{path} is damaged: not a JSON object")
    return doc
