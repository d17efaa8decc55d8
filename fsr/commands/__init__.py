"""The work behind each `fsr` subcommand (fsr.cli only parses).

Exit codes: 0 success; 1 the candidate's verdict is not OK; 2 bad input; 3 no CUDA device, or fsr's
own machinery failed on the GPU (fsr.types.EvaluatorFault: no verdict).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

EXIT_OK, EXIT_VERDICT, EXIT_USAGE, EXIT_NO_DEVICE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """Bad user input: reported in one line, exit code 2."""


def bad_input_errors() -> tuple[type[BaseException], ...]:
    """Every error that means bad input (exit 2, one line): imported only once one was raised."""
    from fsr import candidate, config, lineage, tasks
    from fsr.evaluate.compile import CompilerUnavailable
    from fsr.files import InputFileError

    return (UsageError, tasks.TaskError, config.ConfigError, candidate.HeaderError, lineage.LineageError,
            CompilerUnavailable, InputFileError, FileNotFoundError, IsADirectoryError, NotADirectoryError)


def config_option(section: str, name: str) -> Callable[[str], Any]:
    """An argparse `type=` for an option that sets a config field: converted and checked exactly
    like the field's value in a config file, so both refuse the same values."""
    from fsr import config

    def parse(text: str) -> Any:
        try:
            return config.parse_text(section, name, text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{e}, not {text!r}{_out_of_range(text)}") from None

    return parse


def _out_of_range(text: str) -> str:
    """Why a number that reads as one is still refused: "" where it is not that."""
    try:
        if abs(int(text)) >= 2**63:
            return " (past the largest integer a setting holds, 2**63 - 1)"
    except ValueError:
        try:
            if not math.isfinite(float(text)):
                return " (not a finite number)"
        except ValueError:
            pass
    return ""


def non_empty(what: str) -> Callable[[str], str]:
    """An argparse `type=` for a name or path that may not be empty (an empty one would silently
    mean the default: no model, the working directory)."""
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"expected {what}, not an empty string")
        return text

    return parse


def at_least(low: int) -> Callable[[str], int]:
    """An argparse `type=` for an integer option with a lower bound."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, not {text!r}")
        return value

    return parse
