"""Integer arithmetic over named values, for shapes, grids and roofline counts.

Expressions come from task files and candidate headers, which may be written by a language
model, so they are parsed with `ast` and only a small whitelist is evaluated: numbers, names,
+ - * / // % **, parentheses, and the functions `cdiv`, `min`, `max`; for conditions (a launch's
`when`), comparisons (== != < <= > >=, chained as in Python) and `and`, `or`, `not`, which give
1 or 0. Nothing is `eval`ed.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from functools import lru_cache

from fsr import pyast


class ExprError(ValueError):
    """An expression that cannot be parsed or evaluated; the message names the expression."""


_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_COMPARISONS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_FUNCS: dict[str, Callable[..., float]] = {
    "cdiv": lambda a, b: -(-a // b),
    "min": min,
    "max": max,
}


@lru_cache(maxsize=4096)
def _parse(text: str) -> ast.expr:
    if len(text) > 500:
        raise ExprError(f"expression too long: {text[:40]}...")
    try:
        return pyast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise ExprError(f"cannot parse expression {text!r}: {e.msg}") from None


def evaluate(text: str | int | float, names: Mapping[str, float]) -> float:
    """Value of `text` with `names` bound; raises ExprError naming the problem."""
    if isinstance(text, (int, float)):
        return text
    return _eval(_parse(str(text)), names, str(text))


def evaluate_int(text: str | int, names: Mapping[str, float]) -> int:
    """Value of an expression that must be a whole number (a shape, a grid dimension)."""
    value = evaluate(text, names)
    if value != int(value):
        raise ExprError(f"expression {text!r} is not a whole number ({value})")
    return int(value)


def names_in(text: str | int) -> set[str]:
    """The free names an expression uses (function names excluded)."""
    if isinstance(text, int):
        return set()
    tree = _parse(str(text))
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - calls


def _eval(node: ast.expr, names: Mapping[str, float], text: str) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ExprError(f"unknown name {node.id!r} in expression {text!r}")
        return names[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left, names, text), _eval(node.right, names, text)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ExprError(f"exponent too large in {text!r}")
        try:
            value = _BINOPS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExprError(f"division by zero in {text!r}") from None
        if isinstance(value, complex):  # a negative number to a fractional power
            raise ExprError(f"not a real number in {text!r}")
        return value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand, names, text)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return int(not _eval(node.operand, names, text))
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARISONS for op in node.ops):
        values = [_eval(v, names, text) for v in (node.left, *node.comparators)]
        return int(all(_COMPARISONS[type(op)](a, b) for op, a, b in zip(node.ops, values, values[1:], strict=False)))
    if isinstance(node, ast.BoolOp):  # every operand evaluated: an error anywhere is reported
        values = [bool(_eval(v, names, text)) for v in node.values]
        return int(all(values) if isinstance(node.op, ast.And) else any(values))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
            and not node.keywords):
        args = [_eval(a, names, text) for a in node.args]
        try:
            return _FUNCS[node.func.id](*args)
        except (TypeError, ZeroDivisionError) as e:
            raise ExprError(f"bad call in {text!r}: {e}") from None
    raise ExprError(f"unsupported syntax in expression {text!r}")


# Python spellings of the operators and functions, for `to_python`; the helpers named here
# (`_cdiv`, `_pow`) are defined by the code that runs the translation (fsr.export.runtime).
_PY_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%", ast.Div: "/",
              ast.Pow: "**"}
_PY_FUNCS = {"cdiv": "_cdiv", "min": "min", "max": "max"}
_PY_COMPARISONS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def to_python(text: str | int, name: Callable[[str], str]) -> str:
    """The expression as Python source that computes what `evaluate` computes, each free name
    spelled by `name` (e.g. `v['rows']`), `cdiv` as `_cdiv` and `**` as `_pow` (which keeps the
    exponent bound). Built from the parsed form, node by node, from the same whitelist as
    `evaluate`: nothing of the text reaches the output except numbers and what `name` returns,
    so the result is safe to write into a module whatever the text held. Raises ExprError."""
    if isinstance(text, int):
        return repr(text)
    return _py(_parse(str(text)), name, str(text))


def _py(node: ast.expr, name: Callable[[str], str], text: str) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return repr(node.value) if math.isfinite(node.value) else f"float({str(node.value)!r})"  # 1e999
    if isinstance(node, ast.Name):
        return name(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _py(node.left, name, text), _py(node.right, name, text)
        if isinstance(node.op, ast.Pow):
            return f"_pow({left}, {right})"
        return f"({left} {_PY_BINOPS[type(node.op)]} {right})"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return f"({'-' if isinstance(node.op, ast.USub) else '+'}{_py(node.operand, name, text)})"
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
            and not node.keywords):
        return f"{_PY_FUNCS[node.func.id]}({', '.join(_py(a, name, text) for a in node.args)})"
    return _py_condition(node, name, text)


def _py_condition(node: ast.expr, name: Callable[[str], str], text: str) -> str:
    """A comparison, `not`, `and` or `or` as 1 or 0, every operand computed as `evaluate` does (no
    short circuit: an error anywhere is an error), with no builtins but `min` and `max`."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return f"(0 if {_py(node.operand, name, text)} else 1)"
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARISONS for op in node.ops):
        values = [_py(v, name, text) for v in (node.left, *node.comparators)]
        pairs = [f"(1 if {a} {_PY_COMPARISONS[type(op)]} {b} else 0)"
                 for op, a, b in zip(node.ops, values, values[1:], strict=False)]
        return pairs[0] if len(pairs) == 1 else f"min({', '.join(pairs)})"
    if isinstance(node, ast.BoolOp):
        truths = ", ".join(f"(1 if {_py(v, name, text)} else 0)" for v in node.values)
        return f"{'min' if isinstance(node.op, ast.And) else 'max'}({truths})"
    raise ExprError(f"unsupported syntax in expression {text!r}")
