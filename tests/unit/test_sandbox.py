"""The GPU child's environment: the BLAS/OpenMP thread count it is spawned with."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest

from fsr.evaluate.sandbox import THREAD_VARIABLES, _thread_env


def _report(conn) -> None:
    conn.send({k: os.environ.get(k) for k in THREAD_VARIABLES})


def spawn_and_report(threads: int | None) -> dict[str, str | None]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_report, args=(child,))
    with _thread_env(threads):
        process.start()
    try:
        assert parent.poll(60), "the spawned child did not report"
        return parent.recv()
    finally:
        process.join(30)


def test_child_gets_the_thread_count_and_the_parent_keeps_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as Ray sets it in an actor without CPUs
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    assert spawn_and_report(6) == dict.fromkeys(THREAD_VARIABLES, "6")
    assert os.environ["OMP_NUM_THREADS"] == "1"
    assert "OPENBLAS_NUM_THREADS" not in os.environ


def test_without_a_count_the_child_inherits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert spawn_and_report(None)["OMP_NUM_THREADS"] == "1"
