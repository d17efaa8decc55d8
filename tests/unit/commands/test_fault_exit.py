"""A command on which fsr's own machinery failed (EvaluatorFault) says so in one line and exits 3,
never with a traceback and never as a verdict (exit 1)."""

from __future__ import annotations

from fsr import cli
from fsr.commands import EXIT_NO_DEVICE
from fsr.types import EvaluatorFault


def test_fsrs_fault_is_one_line_and_exit_3(monkeypatch, capsys):
    import fsr.commands.tasks as tasks_command

    def fails(args):
        raise EvaluatorFault("candidate abc: fsr's own code failed in the GPU child twice,\neach time in a fresh child")

    monkeypatch.setattr(tasks_command, "tasks_command", fails)
    assert cli.main(["tasks"]) == EXIT_NO_DEVICE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fsr's own code failed" in err and "Traceback" not in err
