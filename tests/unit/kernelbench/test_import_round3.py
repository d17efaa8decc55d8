"""`fsr import` as a user meets it (round three), with torch: a file skipped for its time bound
leaves no task folder, --out is made only by a file imported, the exit code tells a partial
import (1) from nothing importable (2), a binary file is "not a text file", and a float32 task
whose derived tolerance a float16-rounded result would pass is not written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import DATA, ROOT

pytest.importorskip("torch")

RELU = DATA / "kernelbench" / "level1" / "19_ReLU.py"

MODULE = '''import torch
import torch.nn as nn
{extra}

class Model(nn.Module):
    """{doc}"""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {forward}


batch_size = 64
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

# Sleeps once its task is written and loaded for the check (tasks.check_functions runs the file
# again): the import is past its time bound with a complete task folder staged.
SLOW_TO_LOAD = MODULE.format(extra="import inspect\nimport time\n\nif any(f.function == 'check_functions' for f in "
                                   "inspect.stack()):\n    time.sleep(600)\n",
                             doc="Doubles its input.", forward="x * 2.0")
# float32 rounds x to the offset's ulp (2^-7), float16 emulation only to its own (2^-11 near 4):
# the tolerance float32 needs passes float16.
OFFSET = MODULE.format(extra="", doc="Adds a large offset and takes it away again.", forward="(x + 100000.0) - 100000.0")


def fsr_import(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "fsr", "import", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)


def test_a_file_past_its_time_bound_leaves_no_task_folder_and_the_others_are_a_partial_import(tmp_path):
    slow = tmp_path / "slow.py"
    slow.write_text(SLOW_TO_LOAD)
    # 20 s: well past what ReLU's import takes on a loaded two-core machine (about 5 s)
    out = fsr_import(tmp_path, str(slow), str(RELU), "--out", str(tmp_path / "kb"), "--timeout", "20")
    assert out.returncode == 1, out
    lines = out.stdout.splitlines()
    assert lines[0] == f"skipped {slow}: took longer than 20 s", lines
    assert lines[1].startswith("imported kb1_19_relu") and lines[-1].startswith("imported 1, skipped 1"), lines
    assert sorted(p.name for p in (tmp_path / "kb").iterdir()) == ["kb1_19_relu"]  # nothing of slow, no staging


def test_nothing_importable_is_exit_2_and_creates_no_out(tmp_path):
    notes, blob = tmp_path / "notes.py", tmp_path / "blob.py"
    notes.write_text("print('hello')\n")
    blob.write_bytes(bytes(range(128, 256)))
    one = fsr_import(tmp_path, str(notes), "--out", str(tmp_path / "kb"))
    assert one.returncode == 2 and one.stdout == "", one
    assert one.stderr == f"fsr: error: {notes}: no module-level integer sizes\n"
    both = fsr_import(tmp_path, str(notes), str(blob), "--out", str(tmp_path / "kb"))
    assert both.returncode == 2, both
    assert both.stdout.splitlines() == [f"skipped {notes}: no module-level integer sizes",
                                        f"skipped {blob}: not a text file (not UTF-8)"]
    assert both.stderr.count("\n") == 1 and "none of the 2 files was imported" in both.stderr
    assert not (tmp_path / "kb").exists()


def test_a_float32_tolerance_that_float16_passes_is_not_written(tmp_path):
    from fsr.kernelbench import one

    path = tmp_path / "offset.py"
    path.write_text(OFFSET)
    result = one.import_one(path, tmp_path / "kb")
    assert not result["ok"], result
    assert "float16" in str(result["reason"]) and "a half-precision kernel would pass" in str(result["reason"])
    assert not (tmp_path / "kb").exists()


def test_an_import_in_python_still_writes_the_task_folder(tmp_path):
    from fsr import tasks
    from fsr.kernelbench import one

    result = one.import_one(RELU, tmp_path / "kb")
    assert result["ok"] and "staged" not in result, result
    assert tasks.load(tmp_path / "kb" / "kb1_19_relu").name == "kb1_19_relu"
    assert sorted(p.name for p in (tmp_path / "kb").iterdir()) == ["kb1_19_relu"]
