"""Integer expressions of the sizes that reproduce observed values (shapes, FLOPs).

A dimension of a KernelBench tensor is a literal, a size, a product of sizes, or such a product
under an affine map and a floor division (a strided convolution's or pooling's output extent,
also several strided stages in a row: floor((floor(x / a) + c) / b) = floor((x + a c) / (a b))),
or an integer combination of several sizes plus a constant (channels concatenated: an Inception
module's branches, a dense block's `in + 6 * growth`, an RNN cell's `input + hidden`).
`fit` searches those families, simplest first, and returns an expression that gives every observed
value exactly, or None.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from fsr import expr
from fsr.kernelbench import poly

Point = tuple[dict[str, int], int]


def fit(points: list[Point], names: list[str], fixed: dict[str, int] | None = None) -> str | None:
    """The simplest expression of `names` giving each point's value, or None. A constant is
    written as the one fixed size of that value where there is exactly one (else a literal)."""
    values = {v for _, v in points}
    if len(values) == 1:
        value = values.pop()
        same = [n for n, v in (fixed or {}).items() if v == value and value > 1]
        return same[0] if len(same) == 1 else str(value)
    varying = [n for n in names if len({p[n] for p, _ in points}) > 1]
    for degree in range(1, 4):
        for monomial in itertools.combinations_with_replacement(varying, degree):
            found = _affine_floor(points, monomial)
            if found is not None:
                return found
    return _combination(points, varying)


def _affine_floor(points: list[Point], monomial: tuple[str, ...]) -> str | None:
    ms = [math.prod(p[n] for n in monomial) for p, _ in points]
    vs = [v for _, v in points]
    lo, hi = ms.index(min(ms)), ms.index(max(ms))
    if ms[lo] == ms[hi]:
        return None
    for q in range(1, 65):
        span = ms[hi] - ms[lo]
        a_min = math.ceil((q * vs[hi] - (q * vs[lo] + q - 1)) / span)
        a_max = math.floor((q * vs[hi] + q - 1 - q * vs[lo]) / span)
        for a in range(max(a_min, 1), a_max + 1):
            b_lo = max(q * v - a * m for m, v in zip(ms, vs, strict=True))
            b_hi = min(q * v + q - 1 - a * m for m, v in zip(ms, vs, strict=True))
            if b_lo <= b_hi:
                return _text(a, _simplest(b_lo, b_hi, q), q, "*".join(monomial))
    return None


def _combination(points: list[Point], varying: list[str]) -> str | None:
    """sum(c_i * size_i) + b with integer c_i, b, giving every value. The sizes are those whose
    values are linearly independent over the points (a size always equal to another adds nothing),
    so the coefficients are unique; at least two points more than unknowns, so that an exact fit
    is evidence rather than interpolation."""
    columns = [np.ones(len(points))]
    names: list[str] = []
    for n in varying:
        trial = [*columns, np.array([float(p[n]) for p, _ in points])]
        if np.linalg.matrix_rank(np.stack(trial, axis=1)) == len(trial):
            columns, names = trial, [*names, n]
    if len(names) < 2 or len(points) < len(columns) + 2:
        return None
    values = np.array([float(v) for _, v in points])
    solution = np.linalg.lstsq(np.stack(columns, axis=1), values, rcond=None)[0]
    b, *coefficients = (int(c) for c in np.rint(solution))
    terms = [(c, n) for c, n in zip(coefficients, names, strict=True) if c]
    if not all(sum(c * p[n] for c, n in terms) + b == v for p, v in points):
        return None
    return poly.text(poly.total([{(n,): c for c, n in terms}, {(): b}]))


def _simplest(lo: int, hi: int, q: int) -> int:
    """The offset in [lo, hi] to write: 0 if allowed, else a multiple of q, else the smallest |b|."""
    if lo <= 0 <= hi:
        return 0
    multiples = [b for b in range(lo, hi + 1) if b % q == 0]
    return min(multiples or range(lo, hi + 1), key=abs)


def _text(a: int, b: int, q: int, monomial: str) -> str:
    if q > 1 and a % q == 0 and b % q == 0:
        a, b, q = a // q, b // q, 1
    term = monomial if a == 1 else f"{a}*{monomial}"
    if b:
        term = f"{term} {'+' if b > 0 else '-'} {abs(b)}"
    return term if q == 1 else f"({term}) // {q}"


def check(text: str, points: list[Point]) -> bool:
    """Whether `text` gives every point's value."""
    return all(expr.evaluate(text, p) == v for p, v in points)
