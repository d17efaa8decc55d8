"""`fsr import` as a command: the importing process imports the fsr that started it (not a folder
named fsr in the working directory), its last words reach the user, torch missing is one line,
--out and --max-bench-bytes are checked, and the exit code says whether every file was imported."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fsr import cli, commands, tasks
from fsr.commands import importer
from tests.support.paths import ROOT

RELU = ROOT / "tests/data/kernelbench/level1/19_ReLU.py"


def fsr_from(cwd: Path, *args: str, before: str = "") -> subprocess.CompletedProcess:
    """`fsr ARGS` run from `cwd` with this checkout's fsr on PYTHONPATH and the working directory
    off sys.path (as the installed `fsr` script runs); `before` runs first in that process."""
    code = f"import sys\n{before}\nfrom fsr.cli import main\nsys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-P", "-c", code, *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def one_line_error(out: subprocess.CompletedProcess | tuple[int, str], *words: str) -> None:
    code, stderr = (out.returncode, out.stderr) if isinstance(out, subprocess.CompletedProcess) else out
    assert code == 2, stderr
    assert stderr.startswith("fsr: error:") and stderr.count("\n") == 1, stderr
    assert all(w in stderr for w in words), stderr


def test_a_folder_named_fsr_in_the_working_directory_is_not_the_fsr_the_importing_process_uses(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "fsr").mkdir()  # the parent folder of a clone named fsr holds one like it
    (tmp_path / "fsr" / "__init__.py").write_text("raise SystemExit('the wrong fsr')\n")
    out = fsr_from(tmp_path, "import", str(RELU), "--out", str(tmp_path / "tasks"))
    assert out.returncode == 0, out
    assert out.stdout.splitlines()[0].startswith("imported kb1_19_relu: 6 test sizes"), out.stdout


def test_a_dying_importing_process_says_its_last_words_and_the_run_exits_1(tmp_path):
    pytest.importorskip("torch")
    dies = tmp_path / "dies.py"
    dies.write_text("N = 64\nimport os, sys\nsys.stderr.write('the file said this last\\n')\nsys.stderr.flush()\nos._exit(3)\n")
    out = fsr_from(tmp_path, "import", str(dies), str(RELU), "--out", str(tmp_path / "tasks"))
    assert out.returncode == 1, out
    lines = out.stdout.splitlines()
    assert lines[0] == f"skipped {dies}: the importing process died (exit code 3): the file said this last", lines
    assert lines[1].startswith("imported kb1_19_relu") and lines[-1].startswith("imported 1, skipped 1"), lines


def test_without_torch_one_line_says_how_to_get_it(tmp_path):
    out = fsr_from(tmp_path, "import", str(RELU), "--out", str(tmp_path / "tasks"),
                   before="sys.modules['torch'] = None")
    one_line_error(out, "needs torch", "pip install torch --index-url https://download.pytorch.org/whl/cpu")
    assert not (tmp_path / "tasks").exists()


def test_an_importing_process_that_cannot_start_is_one_line_with_its_stderr(tmp_path, monkeypatch, capsys):
    fails = [sys.executable, "-c", "import sys; sys.stderr.write('ImportError: no torch_cpu.so'); sys.exit(1)"]
    monkeypatch.setattr(importer, "child_command", lambda out, max_bytes: fails)
    # the importing processes are stood in for: torch need not be here (the command asks for it first)
    find_spec = importer.importlib.util.find_spec
    monkeypatch.setattr(importer.importlib.util, "find_spec",
                        lambda name, *a: object() if name == "torch" else find_spec(name, *a))
    code = cli.main(["import", str(RELU), str(RELU), "--out", str(tmp_path / "tasks"), "--jobs", "2"])
    one_line_error((code, capsys.readouterr().err), "did not start: ImportError: no torch_cpu.so")


@pytest.mark.parametrize("out, why", [("passwd", "is a file, not a folder"), ("passwd/sub", "cannot create --out")])
def test_an_out_that_is_no_folder_is_one_line(tmp_path, capsys, out, why):
    (tmp_path / "passwd").write_text("root:x:0:0\n")
    code = cli.main(["import", str(RELU), "--out", str(tmp_path / out)])
    one_line_error((code, capsys.readouterr().err), why, str(tmp_path / out))
    assert (tmp_path / "passwd").read_text() == "root:x:0:0\n"


def test_an_installed_fsr_without_out_asks_for_one(tmp_path, monkeypatch, capsys):
    site = tmp_path / "site-packages" / "fsr_tasks"
    site.mkdir(parents=True)
    monkeypatch.setattr(tasks, "DEFAULT_TASKS_DIR", site)
    code = cli.main(["import", str(RELU)])
    one_line_error((code, capsys.readouterr().err), "pass --out DIR")
    assert list(tmp_path.rglob("*")) == [tmp_path / "site-packages", site]


def test_a_checkout_imports_only_into_a_folder_named(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.setattr(tasks, "DEFAULT_TASKS_DIR", tmp_path / "tasks")
    with pytest.raises(commands.UsageError, match="pass --out DIR"):
        importer.output_dir(argparse.Namespace(out=None, tasks_dir=None))
    assert importer.output_dir(argparse.Namespace(out=None, tasks_dir=str(tmp_path / "t"))) == tmp_path / "t"


@pytest.mark.parametrize("text, value", [("4GiB", 4 * 2**30), ("1.5GB", 1_500_000_000), ("0.5kB", 500), ("0", 0)])
def test_byte_counts(text, value):
    assert importer.byte_count(text) == value


@pytest.mark.parametrize("text", ["0.5", "1.5", "3.2b", "1e9", "-1", "4 parsecs"])
def test_a_byte_count_that_is_no_whole_number_of_bytes_is_rejected(text):
    with pytest.raises(argparse.ArgumentTypeError):
        importer.byte_count(text)
