"""Keeps Ray's own output out of the user's terminal: it goes to a log file instead.

Three things of Ray's reach a driver's terminal even with `log_to_driver=False`:
- the "ray" Python logger, which Ray gives a handler to stderr;
- the error messages Ray publishes to every driver (a worker killed, a node's raylet gone with
  the last lines of its log, "[state-dump] ..."), printed to stdout by the thread that
  `ray.init` starts for them;
- fsr's own cluster layer logging through Python's last-resort handler.

`route_ray_output(path)` sends all three to `path`. What the user should know about, the
executor reports itself, in one line each, through the progress view. The error thread's
printer is a private name of Ray's (cluster.ray_compat); if a Ray version lacks it, its
messages are left alone rather than lost.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from cluster import ray_compat

_lock = threading.Lock()
_handler: logging.FileHandler | None = None


def route_ray_output(path: str | Path) -> None:
    """Write Ray's logger, Ray's published errors and fsr's cluster log to `path` (appended;
    a later call moves them to its own file)."""
    global _handler
    path = Path(path).resolve()
    with _lock:
        old = _handler
    if old is not None and old.baseFilename == str(path):
        handler = old  # called again (after ray.init): only Ray's new stream handlers go
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    with _lock:
        _handler = handler
    for name, level in (("ray", None), ("cluster", logging.INFO)):
        logger = logging.getLogger(name)
        for h in list(logger.handlers):
            if h is not handler and (isinstance(h, logging.StreamHandler) or h is old):
                logger.removeHandler(h)
        if handler not in logger.handlers:
            logger.addHandler(handler)
        logger.propagate = False
        if level is not None:
            logger.setLevel(level)
    if old is not None and old is not handler:
        old.close()
    _route_published_errors()


def _route_published_errors() -> None:
    if ray_compat.published_error_printer() is not _to_log:
        ray_compat.set_published_error_printer(_to_log)


def _to_log(data: dict[str, Any], ignore_prefix: bool = False) -> None:
    """Stand-in for Ray's printer of published errors and worker output: one log record a line."""
    del ignore_prefix
    with _lock:
        handler = _handler
    if handler is None:
        return
    source = f"{data.get('pid', '')}{', ip=' + str(data['ip']) if data.get('ip') else ''}"
    for line in data.get("lines", []):
        for part in str(line).splitlines() or [""]:
            record = logging.LogRecord("ray.published", logging.WARNING, "", 0, f"({source}) {part}",
                                       None, None)
            record.created = time.time()
            handler.handle(record)
