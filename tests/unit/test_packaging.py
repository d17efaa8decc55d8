"""fsr installed as a package (a wheel, `pip install .`) carries its built-in tasks, and the
README's set-up is the two commands CI runs (.ci/run runs them as written, then installs a built
wheel into a fresh environment: .ci/wheel_check)."""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support.paths import ROOT


def test_every_file_of_every_task_folder_is_package_data():
    """A task file the wheel's globs miss would make an installed fsr's task fail to load."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["fsr_tasks"]
    files = [p.relative_to(ROOT / "tasks").as_posix() for p in (ROOT / "tasks").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.name != "__init__.py"]
    missed = [f for f in files if not any(fnmatch.fnmatch(f, g) and f.count("/") == g.count("/") for g in globs)]
    assert files and not missed, f"tasks/ files the wheel would leave out: {missed}"


def test_an_installed_fsr_finds_its_tasks_in_fsr_tasks_not_next_to_a_source_tree(tmp_path):
    """The layout a wheel installs (fsr/ and fsr_tasks/ side by side in site-packages, no
    pyproject.toml), imported from another directory."""
    site = tmp_path / "site-packages"
    shutil.copytree(ROOT / "fsr", site / "fsr", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tasks", site / "fsr_tasks", ignore=shutil.ignore_patterns("__pycache__"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = "from fsr import tasks; print(tasks.DEFAULT_TASKS_DIR); print(len(tasks.list_tasks()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=elsewhere, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(site)})
    assert out.returncode == 0, out.stderr
    where, count = out.stdout.split()
    assert Path(where) == site / "fsr_tasks" and int(count) == len(list((ROOT / "tasks").glob("*/task.toml")))


def test_the_readme_set_up_is_a_virtual_environment_and_its_own_python():
    """Stock Debian/Ubuntu refuse pip outside a venv (PEP 668) and have no `python`; the tests run
    over pytest-xdist workers, which the dev extra installs."""
    out = subprocess.run([str(ROOT / ".ci" / "readme_setup"), str(ROOT / "README.md")], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    install, test = out.stdout.splitlines()
    assert install.startswith("python3 -m venv .venv && .venv/bin/pip install ") and '-e ".[dev]"' in install
    assert test == ".venv/bin/python -m pytest -n auto"
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert any(d.startswith("pytest-xdist") for d in dev)


def test_readme_setup_refuses_a_set_up_block_of_other_than_two_commands(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Set up\n\n```\npip install -e .\n```\n\n## Quick start\n\n```\nfsr tasks\n```\n")
    out = subprocess.run([str(ROOT / ".ci" / "readme_setup"), str(readme)], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 1 and "found 1" in out.stderr
