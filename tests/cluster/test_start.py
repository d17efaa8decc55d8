"""cluster.start.connect, each case in a fresh interpreter (the session's Ray is already up)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]


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
              "from tests.cluster.evaluators import MarkedEvaluatorFactory, candidates\n"
              "connect(None, num_gpus=2)\n"
              "ex = RayExecutor(MarkedEvaluatorFactory(latency_s=0.0))\n"
              "ex.submit(candidates(1)[0])\n"
              "got = []\n"
              "while not got:\n    got = ex.poll(5.0)\n"
              "ex.close()\n"
              "print('GPUS', int(ray.cluster_resources()['GPU']), got[0].verdict)\n")
    assert "GPUS 2 OK" in out.stdout, out.stderr[-2000:]
