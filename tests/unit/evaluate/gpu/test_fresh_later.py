"""When a GPU child starts certification's inputs (Child.start_fresh): at a task's preparation,
except with `eval.certify` "end" while the host still builds screening contents (such a task is
certified at its end; its fresh float64 references would slow the other tasks' preparations);
a task dropped meanwhile, or whose certification came first, is left alone."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("cupy")  # the child's module imports it (no device needed here)

from fsr.evaluate.gpu import certify  # noqa: E402
from fsr.evaluate.gpu.child import Child  # noqa: E402


def child(mode: str, idle: bool) -> Child:
    c = Child.__new__(Child)  # the policy alone: no device, no threads
    c.cfg = SimpleNamespace(certify=mode)
    c.contents = SimpleNamespace(idle=lambda: idle)
    c.fresh_later = []
    return c


def state(name: str, dropped: bool = False, started: bool = False) -> SimpleNamespace:
    return SimpleNamespace(name=name, sets=[] if dropped else [object()], fresh=object() if started else None)


@pytest.fixture
def started(monkeypatch) -> list[str]:
    names: list[str] = []
    monkeypatch.setattr(certify, "fresh_inputs", lambda s: names.append(s.name))
    return names


def test_with_end_the_fresh_inputs_wait_for_the_screening_builds(started) -> None:
    c = child("end", idle=False)
    c.fresh_later = [state("gemv"), state("sgemm")]
    c.start_fresh()
    assert started == [] and len(c.fresh_later) == 2  # the host still builds the screening sets
    c.contents = SimpleNamespace(idle=lambda: True)
    c.fresh_later.append(state("gone", dropped=True))
    c.fresh_later.append(state("asked", started=True))  # a certification came first and started its own
    c.start_fresh()
    assert started == ["gemv", "sgemm"] and c.fresh_later == []


@pytest.mark.parametrize("mode", ["leads"])
def test_other_modes_start_them_at_once(started, mode) -> None:
    c = child(mode, idle=False)  # a best is certified as it comes: its sets are wanted soon
    c.fresh_later = [state("softmax")]
    c.start_fresh()
    assert started == ["softmax"] and c.fresh_later == []
