"""Just enough of the C preprocessor to drop the inactive `#if` branches of a feature template.

Conditions are evaluated on the candidate's defines (tunables and feature switches) and on the
object-like macros met in active code whose bodies are constant expressions over those
(`#define TILE 256`, `#define PREFETCH (DOUBLE_BUFFER && ITEMS <= 32)`, `#define N (A < B ? A : B)`). A condition that names
anything else (e.g. `__CUDA_ARCH__`) is unknown: all of its branches are kept, so detection errs
towards seeing a feature rather than missing one. Conditions are parsed with `ast` and a
whitelist; nothing is `eval`ed.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Mapping
from functools import lru_cache

from fsr import pyast

# Starts with the literal "#" so that `re` can skip to candidates fast; `_at_line_start` checks
# that only blanks precede it.
_DIRECTIVE = re.compile(r"#[ \t]*(if|ifdef|ifndef|elif|else|endif|define)\b(.*)$", re.M)
_MACRO = re.compile(r"^\s*(\w+)\s+(\S.*?)\s*$")  # an object-like macro (a function-like one has "(" at its name)
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.LShift: operator.lshift,
           ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
           ast.BitXor: operator.xor}
_CMPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
         ast.Gt: operator.gt, ast.GtE: operator.ge}


class Unknown(Exception):
    """A condition that cannot be decided from the defines at hand."""


def evaluate(text: str, names: Mapping[str, int]) -> int:
    """Integer value of a constant expression over `names`: a `#if` condition, or a macro's body
    such as `(A && B)` or `(BLOCK * ITEMS)`. Raises Unknown (also for `defined(X)` of a name not
    at hand: the compiler may define it, e.g. __CUDA_ARCH__)."""
    tree, defined = _parse(text)
    if any(d not in names for d in defined):
        raise Unknown(text)
    return _value(tree, {**names, **{f"_defined_{i}": 1 for i in range(len(defined))}})


def condition(text: str, names: Mapping[str, int]) -> bool:
    """Value of a `#if` condition; raises Unknown (see `evaluate`)."""
    return bool(evaluate(text, names))


@lru_cache(maxsize=1024)
def _parse(text: str) -> tuple[ast.expr, tuple[str, ...]]:
    """A condition as a Python expression tree; `defined(X)` becomes the name `_defined_<i>`,
    and the Xs are returned alongside."""
    defined: list[str] = []

    def sub(m: re.Match[str]) -> str:
        defined.append(m.group(1) or m.group(2))
        return f"_defined_{len(defined) - 1}"

    text = re.sub(r"\bdefined\s*\(\s*(\w+)\s*\)|\bdefined\s+(\w+)", sub, text)
    text = re.sub(r"(\d+)[uUlL]+\b", r"\1", text)
    text = _conditional(text)
    text = text.replace("&&", " and ").replace("||", " or ").replace("/", "//")
    text = re.sub(r"!(?!=)", " not ", text)
    try:
        tree = pyast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise Unknown(text) from None
    return tree, tuple(defined)


def _conditional(text: str) -> str:
    """C's `c ? a : b` (right-associative, below `||`) as Python's `(a if c else b)`, within
    parentheses too; raises Unknown when the parentheses or the `?`s and `:`s do not pair."""
    flat, i = "", 0
    while i < len(text):  # each outermost parenthesised group first
        if text[i] == ")":
            raise Unknown(text)
        if text[i] != "(":
            flat, i = flat + text[i], i + 1
            continue
        depth, j = 1, i + 1
        while j < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        if depth:
            raise Unknown(text)
        flat, i = flat + "(" + _conditional(text[i + 1:j - 1]) + ")", j
    top = [k for k, ch in enumerate(flat) if ch in "?:"]  # those within parentheses are rewritten already
    if not top:
        return flat
    if flat[top[0]] != "?":
        raise Unknown(text)
    nest = 0
    for k in top[1:]:  # the ':' that pairs with the first '?'
        if flat[k] == "?":
            nest += 1
        elif nest:
            nest -= 1
        else:
            cond, then, other = flat[:top[0]], flat[top[0] + 1:k], flat[k + 1:]
            return f"(({_conditional(then)}) if ({cond}) else ({_conditional(other)}))"
    raise Unknown(text)


def _value(node: ast.expr, names: Mapping[str, int]) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return int(node.value)
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise Unknown(node.id)
        return names[node.id]
    if isinstance(node, ast.IfExp):  # a C conditional: only the branch taken is evaluated
        return _value(node.body if _value(node.test, names) else node.orelse, names)
    if isinstance(node, ast.BoolOp):
        values = [_value(v, names) for v in node.values]
        return int(all(values) if isinstance(node.op, ast.And) else any(values))
    if isinstance(node, ast.UnaryOp):
        v = _value(node.operand, names)
        if isinstance(node.op, ast.Not):
            return int(not v)
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.Invert):
            return ~v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return int(_BINOPS[type(node.op)](_value(node.left, names), _value(node.right, names)))
    if isinstance(node, ast.Compare):
        left = _value(node.left, names)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _value(right_node, names)
            if type(op) not in _CMPS or not _CMPS[type(op)](left, right):
                return 0
            left = right
        return 1
    raise Unknown(ast.dump(node))


def active_source(source: str, defines: Mapping[str, int]) -> str:
    """`source` with the text of branches that are off under `defines` removed. Directive lines
    themselves are dropped, except `#define`s in active code (they do not match detectors, and
    a macro's body may be what shows a feature)."""
    if "#" not in source:
        return source
    names = dict(defines)
    out: list[str] = []
    # Each frame: (parent active, this branch active, a branch already taken, condition unknown).
    stack: list[tuple[bool, bool, bool, bool]] = []
    last = 0
    for m in _DIRECTIVE.finditer(source):  # text between directives is copied whole, not by line
        line_start = source.rfind("\n", 0, m.start()) + 1
        if source[line_start:m.start()].strip(" \t"):
            continue  # a "#" inside a line (a string, a token paste): not a directive
        active = not stack or stack[-1][1]
        if active:
            out.append(source[last:line_start])
        last = m.end()
        kind, rest = m.group(1), m.group(2).strip()
        if kind == "define":
            if active and (d := _MACRO.match(rest)):
                try:  # an integer, or an expression over known names
                    names[d.group(1)] = evaluate(d.group(2), names)
                except Unknown:
                    names.pop(d.group(1), None)  # not known here: an #if on it keeps both branches
            if active:
                out.append(m.group(0))
        elif kind in ("if", "ifdef", "ifndef"):
            stack.append(_open(kind, rest, names, active))
        elif kind == "elif" and stack:
            stack[-1] = _elif(stack[-1], rest, names)
        elif kind == "else" and stack:
            parent, _, taken, unknown = stack[-1]
            stack[-1] = (parent, parent and (unknown or not taken), True, unknown)
        elif kind == "endif" and stack:
            stack.pop()
    if not stack or stack[-1][1]:
        out.append(source[last:])
    return "".join(out)


def _open(kind: str, rest: str, names: Mapping[str, int], parent: bool) -> tuple[bool, bool, bool, bool]:
    try:
        if kind == "if":
            value = condition(rest, names)
        else:
            word = rest.split()[0] if rest.split() else ""
            if word not in names:
                raise Unknown(word)
            value = kind == "ifdef"
    except Unknown:
        return (parent, parent, False, True)
    return (parent, parent and value, value, False)


def _elif(frame: tuple[bool, bool, bool, bool], rest: str, names: Mapping[str, int]) -> tuple[bool, bool, bool, bool]:
    parent, _, taken, unknown = frame
    if unknown:
        return (parent, parent, taken, True)
    if taken:
        return (parent, False, True, False)
    try:
        value = condition(rest, names)
    except Unknown:
        return (parent, parent, False, True)
    return (parent, parent and value, value, False)
