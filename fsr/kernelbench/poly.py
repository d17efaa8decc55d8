"""A sum of products of shape expressions, collected into one polynomial of the sizes.

A task's `bytes` is each argument's element size times the product of its dimensions, summed
over the arguments. Written term by term, a module of many layers (a dense block: one set of
weights per layer, each `in + i * growth` wide) passes the 500 characters an expression may
hold; collected, it is a handful of monomials. A dimension that is not a polynomial (a floor
division) is kept whole as one factor.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from fsr import pyast

Poly = dict[tuple[str, ...], int]  # sorted factors (names, or whole expressions in parentheses) -> coefficient


def of(text: str) -> Poly:
    """The polynomial of one expression: names, integers, +, - and * expanded; anything else one factor."""
    return _poly(pyast.parse(text.strip(), mode="eval").body)


def _poly(node: ast.expr) -> Poly:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return {(): node.value}
    if isinstance(node, ast.Name):
        return {(node.id,): 1}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return {k: -c for k, c in _poly(node.operand).items()}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
        left, right = _poly(node.left), _poly(node.right)
        if isinstance(node.op, ast.Mult):
            return product([left, right])
        sign = -1 if isinstance(node.op, ast.Sub) else 1
        return _collect([*left.items(), *((k, sign * c) for k, c in right.items())])
    return {(f"({ast.unparse(node)})",): 1}


def _collect(terms: Iterable[tuple[tuple[str, ...], int]]) -> Poly:
    out: Poly = {}
    for key, c in terms:
        out[key] = out.get(key, 0) + c
    return {k: c for k, c in out.items() if c}


def product(polys: Iterable[Poly]) -> Poly:
    """The expanded product."""
    out: Poly = {(): 1}
    for p in polys:
        out = _collect((tuple(sorted(a + b)), ca * cb) for a, ca in out.items() for b, cb in p.items())
    return out


def total(polys: Iterable[Poly]) -> Poly:
    """The sum."""
    return _collect(item for p in polys for item in p.items())


def text(p: Poly) -> str:
    """`4*B*C*H*W + 16*C + 64`: highest degree first, positive terms before negative ones."""
    order = sorted(p.items(), key=lambda kc: (kc[1] < 0, -len(kc[0]), kc[0]))
    out = ""
    for key, c in order:
        term = "*".join(([str(abs(c))] if abs(c) != 1 or not key else []) + list(key))
        out = (f"-{term}" if c < 0 else term) if not out else f"{out} {'-' if c < 0 else '+'} {term}"
    return out or "0"
