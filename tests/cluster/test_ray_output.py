"""Ray's own output (its logger, the errors it publishes to drivers, such as a lost raylet's
"[state-dump]" lines) goes to the run's log file, not the terminal."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from cluster.ray_compat import publish_error_to_driver, ray_worker
from cluster.ray_output import route_ray_output
from tests.cluster.conftest import RAY_WAIT_S

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("ray_cluster")]


@pytest.fixture
def restored_logging(monkeypatch) -> Iterator[None]:
    """Leave Ray's printer and the loggers as they were for the other tests."""
    monkeypatch.setattr(ray_worker, "print_to_stdstream", ray_worker.print_to_stdstream)
    saved = {name: (list(lg.handlers), lg.propagate, lg.level)
             for name in ("ray", "cluster") for lg in [logging.getLogger(name)]}
    yield
    for name, (handlers, propagate, level) in saved.items():
        lg = logging.getLogger(name)
        lg.handlers[:] = handlers
        lg.propagate, lg.level = propagate, level


def publish(text: str) -> None:
    publish_error_to_driver("fsr_test", text, gcs_client=ray_worker.global_worker.gcs_client)


def wait_for(read, text: str, timeout_s: float = RAY_WAIT_S) -> str:
    deadline = time.monotonic() + timeout_s
    seen = ""
    while time.monotonic() < deadline:
        seen += read()
        if text in seen:
            return seen
        time.sleep(0.2)
    return seen


def test_ray_output_goes_to_the_log_file_and_not_the_terminal(tmp_path: Path, capfd, restored_logging):
    publish("before routing [state-dump] NodeManager")
    assert "before routing [state-dump]" in wait_for(lambda: "".join(capfd.readouterr()), "before routing")

    log_file = tmp_path / "run" / "cluster.log"
    route_ray_output(log_file)
    publish("after routing [state-dump] NodeManager")
    logging.getLogger("ray").warning("ray's logger speaking")
    logging.getLogger("cluster.executor").warning("worker w00 lost: its node is gone")
    written = wait_for(lambda: log_file.read_text() if log_file.exists() else "", "after routing")
    assert "after routing [state-dump] NodeManager" in written
    assert "ray's logger speaking" in written and "worker w00 lost" in written
    terminal = "".join(capfd.readouterr())
    assert "after routing" not in terminal and "ray's logger" not in terminal and "w00 lost" not in terminal
    assert ray.is_initialized()
