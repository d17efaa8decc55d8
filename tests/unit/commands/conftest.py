"""Fixtures of the command tests: a small tasks folder and a fake GPU behind `fsr run`/`fsr bench`."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from fsr.testing.fakes import FakeEvaluator, FakeExecutor
from fsr.types import Candidate, Evaluation
from tests.support.paths import ROOT


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """A tasks dir of two built-in tasks."""
    for name in ("softmax", "layernorm"):
        shutil.copytree(ROOT / "tasks" / name, tmp_path / "tasks" / name)
    return tmp_path / "tasks"


class Comparing(FakeEvaluator):
    """The fake evaluator, with a library time for every task and a PyTorch time for softmax."""

    def evaluate(self, cand: Candidate) -> Evaluation:
        ev = super().evaluate(cand)
        return replace(ev, library_us=500.0, torch_us=250.0 if cand.task == "softmax" else None)


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fsr.commands.run._executor", lambda *a: FakeExecutor(Comparing(), slots=2))
