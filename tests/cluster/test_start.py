"""cluster.start.connect, each case in a fresh interpreter (the session's Ray is already up)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from cluster import processes
from tests.support.paths import ROOT

pytestmark = pytest.mark.cluster



def run(code: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout_s)


def test_an_unreachable_address_is_one_clear_line_within_seconds():
    start = time.monotonic()
    out = run("from cluster.start import connect, ClusterError\n"
              "try:\n    connect('127.0.0.1:9')\nexcept ClusterError as e:\n    print('ERR', e)\n")
    assert time.monotonic() - start < 20.0
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("ERR")]
    assert "cannot reach the Ray head at 127.0.0.1:9" in line


def test_a_malformed_address_is_refused():
    out = run("from cluster.start import connect, ClusterError\n"
              "try:\n    connect('nonsense')\nexcept ClusterError as e:\n    print('ERR', e)\n")
    assert "cannot parse Ray address 'nonsense'" in out.stdout


def test_the_embedded_default_declares_the_requested_gpus_and_runs_a_worker():
    out = run("import ray\n"
              "from cluster.start import connect\n"
              "from cluster.executor import RayExecutor\n"
              "from cluster.testing import MarkedEvaluatorFactory, candidates\n"
              "connect(None, num_gpus=2)\n"
              "ex = RayExecutor(MarkedEvaluatorFactory(latency_s=0.0))\n"
              "ex.submit(candidates(1)[0])\n"
              "got = []\n"
              "while not got:\n    got = ex.poll(5.0)\n"
              "ex.close()\n"
              "print('GPUS', int(ray.cluster_resources()['GPU']), got[0].verdict)\n")
    assert "GPUS 2 OK" in out.stdout, out.stderr[-2000:]


def marked_processes(mark: str) -> dict[int, str]:
    """Pid -> name of the live processes whose environment holds FSR_TEST_MARK=mark: every process the
    driver started, Ray's agents included (they rename themselves, but keep the environment)."""
    needle = f"FSR_TEST_MARK={mark}".encode()
    found = {}
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
                found[int(pid)] = cmd.decode(errors="replace")
        except OSError:
            continue
    return found


UP_WAIT_S = 90.0  # Ray is up within seconds on an idle machine


def ray_is_up(names: list[str]) -> bool:
    """The driver's Ray is up: its raylet runs and so does one of Ray's own processes beside it
    (the agents, where a Ray version starts them, or a worker process "ray::...")."""
    return any(n.endswith("/raylet") for n in names) and any("Agent" in n or n.startswith("ray::") for n in names)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_ctrl_c_during_the_embedded_start_leaves_no_ray_process():
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) once Ray is up (the GCS,
    the raylet, its agents or workers), while the driver is still connecting or just done: within
    seconds nothing of that Ray is left (the agents used to run on for minutes)."""
    mark = uuid.uuid4().hex
    env = {**os.environ, "FSR_TEST_MARK": mark, "RAY_USAGE_STATS_ENABLED": "0"}
    driver = subprocess.Popen([sys.executable, "-c", "from cluster.start import connect\n"
                               "connect(None, num_gpus=1)\nimport time\ntime.sleep(3600)\n"],
                              cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + UP_WAIT_S
        while not ray_is_up(list(marked_processes(mark).values())) and time.monotonic() < deadline:
            assert driver.poll() is None, f"the driver exited ({driver.returncode}) before Ray was up"
            time.sleep(0.1)
        assert ray_is_up(list(marked_processes(mark).values())), \
            f"Ray not up within {UP_WAIT_S:.0f} s: {sorted(set(marked_processes(mark).values()))}"
        os.killpg(driver.pid, signal.SIGINT)
        driver.wait(timeout=60)
        deadline = time.monotonic() + 30.0  # orphaned agents used to run on for 1-3 minutes
        while marked_processes(mark) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marked_processes(mark) == {}
    finally:
        if driver.poll() is None:
            driver.kill()
        processes.stop(marked_processes(mark))  # a failed run leaves nothing for the next test
