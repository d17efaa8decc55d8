"""A token-protected local two-node cluster (fake GPUs, as in conftest.py): fsr's driver with
the token runs a campaign on it; a client without the token, or with a wrong one, is refused in
one line; no token or API key reaches a worker or the run directory.

The cluster runs in its own process with its own HOME, where its token is (~/.ray/auth_token,
mode 0600, where Ray looks); each client is a fresh interpreter given that HOME, another one, or
a wrong RAY_AUTH_TOKEN. Nothing here touches the session's unauthenticated cluster.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import processes
from fsr.lineage import read
from fsr.testing.llm_server import GOOD_KERNEL, ScriptedServer, fenced, reply
from tests.support.paths import ROOT

pytestmark = pytest.mark.cluster


FAKE_KEY = "sk-fsr-test-" + secrets.token_hex(8)
START_S = 240.0

CLUSTER = """
import sys
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True,
                  head_node_args={"num_cpus": 1, "num_gpus": 1, "include_dashboard": False})
cluster.add_node(num_cpus=1, num_gpus=1)
cluster.wait_for_nodes()
print("ADDRESS", cluster.address, flush=True)
sys.stdin.read()  # until the test closes it
cluster.shutdown()
"""

# fsr's own CLI, with the cluster tests' fake evaluator in each GPU worker (shipped with the job).
FAKE_FSR = """
import sys
import cluster.executor, cluster.start
from fsr.cli import main
from cluster.testing import MarkedEvaluatorFactory
cluster.executor.gpu_evaluator_factory = lambda *a, **k: MarkedEvaluatorFactory(latency_s=0.05)
cluster.start.SHIPPED_PACKAGES += ("tests",)
sys.exit(main(sys.argv[1:]))
"""

# What a worker sees: is the driver's API key in its environment, and whose fsr does it import.
PROBE_WORKER = """
import os, sys, ray
from cluster.start import connect
connect(sys.argv[1] if sys.argv[1] != "embedded" else None, num_gpus=1, secrets=("CUSTOM_LLM",))

@ray.remote(num_cpus=0)
def seen():
    import fsr
    return sorted(n for n in ("OPENAI_API_KEY", "CUSTOM_LLM") if n in os.environ), fsr.__file__

print("WORKER", *ray.get(seen.remote()))
print("DRIVER", sorted(n for n in ("OPENAI_API_KEY", "CUSTOM_LLM") if n in os.environ))
"""


def client_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    return {**env, "HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT), **extra}


def run(args: list[str], env: dict[str, str], timeout_s: float = START_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout_s)


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    """(address, HOME holding the token, the token)."""
    home = tmp_path_factory.mktemp("home")
    (home / ".ray").mkdir(mode=0o700)
    token = secrets.token_hex(32)
    (home / ".ray" / "auth_token").write_text(token)
    (home / ".ray" / "auth_token").chmod(0o600)
    proc = subprocess.Popen([sys.executable, "-c", CLUSTER], env=client_env(home, RAY_AUTH_MODE="token"),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline()
    try:
        assert line.startswith("ADDRESS "), "the token cluster did not start"
        yield line.split()[1], home, token
    finally:
        pids = processes.tree([proc.pid])
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        processes.stop(processes.tree(pids))


def test_a_driver_with_the_token_runs_a_campaign_and_leaves_no_secret(token_cluster, tmp_path):
    address, home, token = token_cluster
    with ScriptedServer([reply(fenced(GOOD_KERNEL + f"// variant {i}\n")) for i in range(40)]) as server:
        out = run(["-c", FAKE_FSR, "run", "softmax", "--address", address, "--model", "scripted",
                   "--base-url", server.base_url, "--max-evaluations", "6", "--islands", "1",
                   "--tune-trials", "0", "--plain", "--runs-dir", str(tmp_path / "runs")],
                  client_env(home, OPENAI_API_KEY=FAKE_KEY))
    assert out.returncode == 0, out.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    tiers = read(run_dir).column("tier").to_pylist()
    assert tiers.count("screen") == 6 and tiers.count("certify") == 1, tiers  # the best certified at the end
    written = {p.relative_to(run_dir).parts[0] for p in run_dir.rglob("*") if p.is_file()}
    assert {"run.json", "cluster.log", "llm_cache"} <= written, written
    for path in run_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert token.encode() not in data and FAKE_KEY.encode() not in data, path
    assert token not in out.stderr + out.stdout and FAKE_KEY not in out.stderr + out.stdout


@pytest.mark.parametrize("case", ["no token", "wrong token"])
def test_a_client_without_the_token_is_refused_in_one_line(token_cluster, tmp_path, case):
    address, _, _ = token_cluster
    env = client_env(tmp_path, **({"RAY_AUTH_TOKEN": "not-the-token"} if case == "wrong token" else {}))
    out = run(["-m", "fsr", "run", "softmax", "--address", address, "--runs-dir", str(tmp_path / "runs")], env,
              timeout_s=120)
    assert out.returncode == 2, out.stderr[-3000:]
    (line,) = out.stderr.strip().splitlines()
    expected = "refused the auth token from RAY_AUTH_TOKEN" if case == "wrong token" else "none was found"
    assert line.startswith(f"fsr: error: the Ray cluster at {address} ") and expected in line, line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_cluster_workers_never_see_the_drivers_api_key_and_run_the_shipped_fsr(token_cluster):
    address, home, _ = token_cluster
    out = run(["-c", PROBE_WORKER, address], client_env(home, OPENAI_API_KEY=FAKE_KEY, CUSTOM_LLM="x"))
    assert "WORKER [] " in out.stdout, out.stdout + out.stderr[-3000:]
    assert "DRIVER ['CUSTOM_LLM', 'OPENAI_API_KEY']" in out.stdout
    worker_fsr = out.stdout.split("WORKER [] ")[1].split()[0]
    assert "runtime_resources" in worker_fsr and not worker_fsr.startswith(str(ROOT)), worker_fsr


def test_embedded_workers_never_see_the_drivers_api_key(tmp_path):
    out = run(["-c", PROBE_WORKER, "embedded"], client_env(tmp_path, OPENAI_API_KEY=FAKE_KEY, CUSTOM_LLM="x"))
    assert "WORKER [] " in out.stdout, out.stdout + out.stderr[-3000:]
    assert "DRIVER ['CUSTOM_LLM', 'OPENAI_API_KEY']" in out.stdout  # the driver keeps them
    token = tmp_path / ".ray" / "auth_token"  # Ray >= 2.59 protects an embedded instance too
    assert not token.exists() or token.stat().st_mode & 0o077 == 0
