"""Running fsr's command line in a test: in this process (fast) or as a subprocess, and the shape
every bad-input message has."""

from __future__ import annotations

import os
import subprocess
import sys

from fsr import cli, commands
from tests.support.paths import ROOT, TASKS

SOFTMAX = TASKS / "softmax"
BASELINE = str(SOFTMAX / "baseline.cu")


def fsr(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fsr", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=180, env={**os.environ, **(env or {})})


def run_main(capsys, *args: str) -> tuple[int, str]:
    """fsr in this process (faster than a subprocess): exit code and stderr."""
    try:
        code = cli.main(list(args))
    except SystemExit as e:  # argparse
        code = int(e.code or 0)
    return code, capsys.readouterr().err


def assert_one_line(code: int, err: str, *said: str) -> None:
    assert code == commands.EXIT_USAGE, err
    assert err.count("\n") == 1 and err.startswith("fsr: error:") and "Traceback" not in err, err
    for s in said:
        assert s in err, err
