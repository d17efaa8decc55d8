"""The cores the evaluator sizes its threads by are the ones this process may run on."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fsr.evaluate import host


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_a_process_pinned_to_one_core_counts_one() -> None:
    code = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); from fsr.evaluate import host; print(host.cores())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"
    assert 1 <= host.cores() <= (os.cpu_count() or 1)
