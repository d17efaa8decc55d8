"""The GPU child's environment: the BLAS/OpenMP thread count it is spawned with, and no second run
of the parent's main script (in a Ray worker, Ray's own)."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
from pathlib import Path

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


def _note_then(conn) -> None:
    """A stand-in GPU child: for each request, a note of what it runs, then what the request
    asks: "reply", "die" (the process exits, as a kernel that kills it), "hang"."""
    import time

    while True:
        try:
            kind, what = conn.recv()
        except EOFError:
            return
        conn.send(("note", f"tuning trial BLOCK={what}"))
        if what == "hang within a deadline":  # the trial's own deadline, shorter than the call's
            conn.send(("note", ("tuning trial BLOCK=1024", 0.5)))
            time.sleep(60)
        if what == "die":
            os._exit(3)
        if what == "hang":
            time.sleep(60)
        conn.send(("ok", f"done {what}"))


def _attached(sandbox):
    from fsr.types import DeviceInfo

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_note_then, args=(child,), daemon=True)
    process.start()
    sandbox.process, sandbox.conn, sandbox.device = process, parent, DeviceInfo("fake", "sm_90")


def test_a_death_or_timeout_names_what_the_child_was_running_and_a_reply_skips_the_notes() -> None:
    from fsr.evaluate.sandbox import Sandbox
    from fsr.evaluate.wire import Died, TimedOut
    from fsr.types import WorkerSpec

    sandbox = Sandbox(WorkerSpec(()))
    _attached(sandbox)
    try:
        assert sandbox.call("evaluate", "reply", 60) == "done reply"
        died = sandbox.call("evaluate", "die", 60)
        assert isinstance(died, Died) and died.reason.endswith("(during tuning trial BLOCK=die)")
        assert "exit code 3" in died.reason
        _attached(sandbox)
        hung = sandbox.call("evaluate", "hang", 2)
        assert isinstance(hung, TimedOut) and hung.doing == "tuning trial BLOCK=hang" and 1.5 < hung.seconds < 10
        _attached(sandbox)
        hung = sandbox.call("evaluate", "hang within a deadline", 60)
        assert isinstance(hung, TimedOut) and hung.doing == "tuning trial BLOCK=1024" and 0.4 < hung.seconds < 5
    finally:
        sandbox.close()


# A main script with a side effect at import: each run of it adds a line to the file it is given.
# `sandbox`: it starts a GPU child through the Sandbox (on a machine without a GPU the child says
# so, after it started); `plain`: it spawns a process as multiprocessing does by default.
MAIN_SCRIPT = textwrap.dedent("""
    import multiprocessing as mp
    import sys

    with open(sys.argv[2] if len(sys.argv) > 2 else "/dev/null", "a") as f:
        f.write("ran\\n")


    def nothing():
        pass


    if __name__ == "__main__":
        if sys.argv[1] == "plain":
            process = mp.get_context("spawn").Process(target=nothing)
            process.start()
            process.join(60)
        else:
            from fsr.evaluate.sandbox import NoDevice, Sandbox
            from fsr.types import WorkerSpec

            sandbox = Sandbox(WorkerSpec(()))
            try:
                sandbox.ensure_started()
            except NoDevice:
                pass
            sandbox.kill()
""")


def runs_of_main(tmp_path: Path, how: str) -> int:
    script, ran = tmp_path / f"main_{how}.py", tmp_path / f"ran_{how}.txt"
    script.write_text(MAIN_SCRIPT)
    done = subprocess.run([sys.executable, str(script), how, str(ran)], capture_output=True, text=True, timeout=300,
                          env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr[-2000:]
    return ran.read_text().count("ran")


def test_the_gpu_child_does_not_run_its_parents_main_script_again(tmp_path: Path) -> None:
    """A process spawned the default way runs the parent's main script again (in a Ray actor,
    Ray's worker script: Ray's imports before every GPU child's start); the GPU child does not."""
    assert runs_of_main(tmp_path, "plain") == 2
    assert runs_of_main(tmp_path, "sandbox") == 1
