"""What a model is shown of a built-in task's reference.py: the semantics, not fsr's harness.

A task's reference.py holds the inputs' distribution (`make_inputs`) and the float64 answer
(`reference`), and beside them what only fsr's judge runs: the comparators (`library`,
`torch_eager`), their helpers (bfloat16 views of CuPy arrays, say), and the module docstring
that explains them. The model is shown `make_inputs` and `reference` with the module-level
names they use, found by following names through the file, so a helper the comparators alone
call never reaches a prompt, whatever it is named.
"""

from __future__ import annotations

import ast
import re

from fsr import pyast

SHOWN = ("make_inputs", "reference")


def semantics(text: str) -> str:
    """`text` (a reference.py) less every top-level statement that `make_inputs` and `reference`
    do not reach, and less the module docstring; comments directly above a statement go with it.
    A file that does not parse is shown as it is (the judge will refuse it anyway)."""
    try:
        tree = pyast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines()
    body = tree.body
    spans = [_span(node, lines) for node in body]
    kept = _reached(body)
    dropped = {i for i in range(len(body)) if i not in kept}
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        dropped.add(0)  # the module docstring: it speaks of the comparators
    out = [line for n, line in enumerate(lines, 1)
           if not any(spans[i][0] <= n <= spans[i][1] for i in dropped)]
    return re.sub(r"\n{3,}", "\n\n\n", "\n".join(out).strip("\n")) + "\n"


def _reached(body: list[ast.stmt]) -> set[int]:
    """Indices of the top-level statements that define a name SHOWN uses, transitively."""
    defines: dict[str, list[int]] = {}
    for i, node in enumerate(body):
        for name in _defined(node):
            defines.setdefault(name, []).append(i)
    kept: set[int] = set()
    todo = [name for name in SHOWN if name in defines]
    while todo:
        for i in defines.get(todo.pop(), []):
            if i not in kept:
                kept.add(i)
                todo += [n.id for n in ast.walk(body[i]) if isinstance(n, ast.Name) and n.id in defines]
    return kept


def _defined(node: ast.stmt) -> list[str]:
    """The module-level names a statement binds."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Import | ast.ImportFrom):
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            return []
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
        if isinstance(node, ast.AnnAssign | ast.AugAssign) else []
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _span(node: ast.stmt, lines: list[str]) -> tuple[int, int]:
    """A statement's first and last line (1-based), its decorators and the comment lines right
    above it included."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    while first > 1 and lines[first - 2].lstrip().startswith("#"):
        first -= 1
    return first, node.end_lineno or node.lineno
