"""`fsr run`: a search campaign (wired to the search loop and executors)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="search for fast kernels for one or more tasks")
    run.add_argument("tasks", nargs="*", help="task names or task directories")


def run_command(args: argparse.Namespace) -> int:
    from fsr.commands import UsageError

    raise UsageError("fsr run is not available yet")
