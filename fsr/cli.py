"""The `fsr` command: argument parsing and config loading only; the work is in fsr.commands.

Exit codes: 0 success; 1 the candidate's verdict is not OK (for `fsr import`: a file was
skipped); 2 bad input (unknown task, missing file, malformed header or config); 3 no CUDA device
(what needs none was still done), or fsr's own machinery failed on the GPU (no verdict).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import typing

import fsr
from fsr.commands import (
    EXIT_INTERRUPTED,
    EXIT_NO_DEVICE,
    EXIT_OK,
    EXIT_USAGE,
    at_least,
    bad_input_errors,
    config_option,
    non_empty,
)


class Parser(argparse.ArgumentParser):
    """argparse with bad input reported like every other: one line on stderr, exit code 2."""

    def error(self, message: str) -> typing.NoReturn:
        if message.startswith("unrecognized arguments") and any(o in message.split() for o in GLOBAL_OPTIONS):
            message += " (--tasks-dir and --config go before the command: fsr --tasks-dir DIR tasks)"
        self.exit(EXIT_USAGE, f"fsr: error: {message} (see {self.prog} --help)\n")


GLOBAL_OPTIONS = ("--tasks-dir", "--config")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="fsr", description="Search for fast, correct CUDA kernels.")
    parser.add_argument("--version", action="version", version=f"fsr {fsr.__version__}")
    parser.add_argument("--tasks-dir", type=non_empty("a folder"),
                        help="folder of task directories (default: the built-in tasks/); before the command")
    parser.add_argument("--config", type=non_empty("a TOML file"),
                        help="TOML config file (sections: eval, tune, search, llm); before the command")
    sub = parser.add_subparsers(dest="command", required=True)

    from fsr.commands import tasks as tasks_command

    tasks_command.add_parser(sub)

    ev = sub.add_parser("eval", help="evaluate one kernel on the local GPU: compile, verify, time, compare")
    ev.add_argument("task")
    ev.add_argument("file", type=non_empty("a .cu file"), help="a .cu file in the candidate format")
    ev.add_argument("--json", action="store_true", help="print the evaluation as JSON")
    ev.add_argument("--lineage", type=non_empty("a run directory"), metavar="RUN_DIR", help="append the evaluation to this run's lineage")
    ev.add_argument("--tune", action="store_true", help="tune the kernel's declared launch parameters")
    ev.add_argument("--tune-trials", type=config_option("tune", "trials"),
                    help="tuning trial budget (0 turns tuning off)")
    ev.add_argument("--timeout", type=config_option("eval", "timeout_s"),
                    help="seconds before a running kernel counts as hung")
    ev.add_argument("--repeat", type=at_least(1), default=1,
                    help="evaluate N times (with --json, one line per evaluation)")
    ev.add_argument("--arch", type=config_option("eval", "arch"),
                    help="compile for this architecture (default: the device's; sm_90 without one); from sm_90 on, code "
                         "that only its arch-specific variant assembles (wgmma) compiles for that (sm_90a)")

    from fsr.commands import run as run_command

    run_command.add_parser(sub)
    from fsr.commands import bench as bench_command

    bench_command.add_parser(sub)
    from fsr.commands import report as report_command

    report_command.add_parser(sub)
    from fsr.commands import explore as explore_command
    from fsr.commands import launch as launch_command

    explore_command.add_parser(sub)
    launch_command.add_parser(sub)
    from fsr.commands import importer as import_command

    import_command.add_parser(sub)
    from fsr.commands import prompt as prompt_command

    prompt_command.add_parser(sub)
    from fsr.commands import export as export_command

    export_command.add_parser(sub)
    return parser


# Each command's module and function, imported only when that command runs (start-up stays quick).
COMMANDS = {
    "tasks": ("fsr.commands.tasks", "tasks_command"), "eval": ("fsr.commands.eval", "eval_command"),
    "run": ("fsr.commands.run", "run_command"), "bench": ("fsr.commands.bench", "bench_command"),
    "report": ("fsr.commands.report", "report_command"), "explore": ("fsr.commands.explore", "explore_command"),
    "launch": ("fsr.commands.launch", "launch_command"), "import": ("fsr.commands.importer", "import_command"),
    "prompt": ("fsr.commands.prompt", "prompt_command"), "export": ("fsr.commands.export", "export_command"),
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    module, function = COMMANDS[args.command]
    try:
        return int(getattr(importlib.import_module(module), function)(args))
    except KeyboardInterrupt:
        print("fsr: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `fsr tasks | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return EXIT_OK
    except Exception as e:
        from fsr.types import EvaluatorFault

        if isinstance(e, EvaluatorFault):  # fsr's fault, not the kernel's: one line, the traceback in the log
            print(f"fsr: error: {_one_line(e)}", file=sys.stderr)
            return EXIT_NO_DEVICE
        if not isinstance(e, bad_input_errors()):
            raise
        print(f"fsr: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE


def _one_line(error: BaseException) -> str:
    """The error's message on one line (TOML and compiler messages may span several)."""
    return " ".join(str(error).split()) or type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
