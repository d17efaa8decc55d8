"""Where the checkout's folders are, named once so a test can move without its data paths."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: fsr/, tasks/, tests/, bench/
TASKS = ROOT / "tasks"
TESTS = ROOT / "tests"
DATA = TESTS / "data"  # vendored problem files, emulation headers, reference kernels
ADVERSARIAL = TESTS / "adversarial"  # the corpus of kernels the judge must refuse
