"""`ast.parse` behind one lock for the process. CPython 3.11's AST constructor keeps its recursion
depth in state that threads share, so two threads parsing at once can fail with "SystemError: AST
constructor recursion depth mismatch" (python/cpython#106905); fsr parses on several threads at
once (a campaign's proposers build prompts in parallel, a KernelBench import checks files on a
pool). Every parse of fsr's goes through here (tests/unit/test_pyast.py holds it to that)."""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """ast.parse(source, filename, mode), one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)
