"""The GPU child's first instance imports PyTorch on a thread as it starts (the comparators need
it; the import takes seconds), and does nothing when PyTorch is not installed. Run in a fresh
interpreter with a stand-in `torch` package on its path, so nothing leaks into this process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PROBE = """
import sys
from fsr.evaluate.gpu import comparators
thread = comparators.import_torch_soon()  # returned, not looked up: a failing import ends at once
if thread is not None:
    assert thread.name == "import-torch" and thread.daemon
    thread.join(10)
print(int(thread is not None), "torch" in sys.modules, getattr(sys.modules.get("torch"), "STAND_IN", False))
"""


def probe(path: Path | None) -> str:
    env_path = [str(path)] if path else []
    code = f"import sys; sys.path[:0] = {env_path!r}\n" + PROBE
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_an_installed_torch_is_imported_on_a_thread(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("import time\ntime.sleep(0.2)\nSTAND_IN = True\n")
    assert probe(tmp_path) == ["1", "True", "True"]


def test_a_torch_that_fails_to_import_stops_nothing(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('broken install')\n")
    assert probe(tmp_path) == ["1", "False", "False"]


def test_without_torch_no_thread_starts():
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("PyTorch is installed here: the case cannot be set up")
    assert probe(None) == ["0", "False", "False"]
