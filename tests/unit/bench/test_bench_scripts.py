"""bench/cluster_drill.sh checks its arguments and the host before it starts anything: the
README's `bash bench/cluster_drill.sh OUT --fake` is accepted, and a mistake is one line at once
(the drill itself, minutes of Ray, is not run here: `--dry-run` stops after the checks)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import ROOT

DRILL = ROOT / "bench" / "cluster_drill.sh"


def drill(*args: str, gpus: int = 0, tmp_path: Path) -> subprocess.CompletedProcess:
    """The script with a stand-in nvidia-smi that lists `gpus` GPUs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + "".join(f"echo 'GPU {i}: Stand-in (UUID: GPU-{i})'\n" for i in range(gpus)))
    smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", str(DRILL), *args], capture_output=True, text=True, env=env, timeout=30,
                          cwd=tmp_path)


@pytest.mark.parametrize(("args", "evals"), [
    (("OUT", "--fake"), 30),  # as the README writes it
    (("OUT", "12", "--fake"), 12),
    (("OUT", "--fake", "12"), 12),
])
def test_the_readme_form_and_evals_in_any_place_are_accepted(tmp_path, args, evals):
    out = drill(*args, "--dry-run", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"{evals} evaluations per run, fake evaluator, logs in {tmp_path / 'OUT'}" in out.stdout
    assert not (tmp_path / "OUT").exists()  # nothing made by a dry run


@pytest.mark.parametrize(("args", "said"), [
    ((), "OUT_DIR is missing"),
    (("OUT", "abc", "--fake"), "EVALS must be an integer of at least 3, not 'abc'"),
    (("OUT", "2", "--fake"), "not '2'"),
    (("OUT", "--fak"), "unknown option --fak"),
    (("OUT", "5", "6", "--fake"), "not also '6'"),
])
def test_bad_arguments_are_one_line_and_exit_2_at_once(tmp_path, args, said):
    out = drill(*args, tmp_path=tmp_path)  # no --dry-run: a bad argument must stop it before the drill
    assert out.returncode == 2, out
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("cluster_drill: error:") and said in out.stderr
    assert not out.stdout


def test_a_real_drill_needs_two_gpus_and_says_so_at_once(tmp_path):
    out = drill("OUT", tmp_path=tmp_path, gpus=1)
    assert out.returncode == 3 and "needs two GPUs, this host has 1" in out.stderr and "--fake" in out.stderr
    assert drill("OUT", "--dry-run", tmp_path=tmp_path, gpus=2).returncode == 0
