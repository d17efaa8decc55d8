"""A problem file's sizes, and the test sizes the importer tries.

Sizes are the file's top-level names bound to an integer computed from literals alone
(`N = 2048 * 2`, `height = width = 128`, `depth, height = 16, 32`), and the elements of a top-level
list of integer literals (`layer_sizes = [16384, 16384]`: `layer_sizes_0`, `layer_sizes_1`); names computed from other names (`bias_shape =
(out_channels, 1, 1)`) follow the sizes when the file runs. The test sizes vary the sizes that
scale the problem (8 or more: smaller ones are axes and counts; and not a kernel, stride, padding, dilation or group count: those
change what the problem computes rather than its extent) and keep the others at the file's values.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from fsr import expr, pyast

STRUCTURAL = ("kernel", "stride", "padding", "dilation", "group", "layers", "heads")
SMALL = (3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)

Sizes = dict[str, int]
Ties = dict[str, str]  # a size the module accepts only equal to another: follower -> leader


def tied(sizes: Sizes, ties: Ties) -> Sizes:
    """`sizes` with each follower set to its leader's value."""
    return {**sizes, **{f: sizes[leader] for f, leader in ties.items()}}


def constants(source: str) -> Sizes:
    """The file's integer sizes and their values, in the order the file binds them."""
    found: Sizes = {}
    for stmt in pyast.parse(source).body:
        for names, value_node in _bindings(stmt):
            try:
                value = expr.evaluate(ast.unparse(value_node), {})
            except (expr.ExprError, ArithmeticError, TypeError):
                continue
            if isinstance(value, int) and not isinstance(value, bool) and 1 <= value < 2**31:
                found.update({n: value for n in names})
    return found


def _bindings(stmt: ast.stmt) -> list[tuple[list[str], ast.expr]]:
    """(names, value) of `a = b = value`, of `a, b = 1, 2` (one pair per element) and of each
    element of a list of integer literals `a = [1, 2]` (named a_0, a_1)."""
    if not isinstance(stmt, ast.Assign):
        return []
    if (len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) and isinstance(stmt.value, ast.List)
            and all(isinstance(v, ast.Constant) and type(v.value) is int for v in stmt.value.elts)):
        return [([f"{stmt.targets[0].id}_{i}"], v) for i, v in enumerate(stmt.value.elts)]  # layer widths
    if all(isinstance(t, ast.Name) for t in stmt.targets):
        return [([t.id for t in stmt.targets if isinstance(t, ast.Name)], stmt.value)]
    target = stmt.targets[0]
    if (len(stmt.targets) == 1 and isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple)
            and len(target.elts) == len(stmt.value.elts) and all(isinstance(t, ast.Name) for t in target.elts)):
        return [([t.id], v) for t, v in zip(target.elts, stmt.value.elts, strict=True) if isinstance(t, ast.Name)]
    return []


def scaling(bench: Sizes) -> list[str]:
    """The sizes the test sizes vary."""
    return [n for n, v in bench.items() if v >= 8 and not any(s in n.lower() for s in STRUCTURAL)]


def shrink(start: Sizes, names: list[str], too_big: Callable[[Sizes], bool | None], ties: Ties | None = None) -> Sizes:
    """Halve the largest of `names` (its followers with it) until `too_big` says False; None from
    it means the size does not run, and that name stays where it was."""
    sizes, stuck = dict(start), set()
    for _ in range(200):
        verdict = too_big(sizes)
        if verdict is False:
            return sizes
        free = [n for n in names if n not in stuck and sizes[n] > 1]
        if not free:
            return sizes
        name = max(free, key=lambda n: sizes[n])
        trial = tied({**sizes, name: sizes[name] // 2}, ties or {})
        if too_big(trial) is None:
            stuck.add(name)
        else:
            sizes = trial
    return sizes


def odd(value: int) -> int:
    return value if value % 2 else value + 1


def candidates(bench: Sizes, names: list[str], large: Sizes, step: dict[str, int], ties: Ties | None = None) -> list[Sizes]:
    """Test sizes to try, largest first: odd, non-multiples, tiny and the powers of two of
    `large`, every size varied together; then each size alone (the others at `large`), for a
    module that accepts few values of some sizes (a deep convnet's image extent). A name in
    `step` keeps a multiple of its step (the file needs divisibility); a follower in `ties` takes
    its leader's value."""
    def value(n: str, v: int) -> int:
        v = max(1, min(v, bench[n]))
        return max(step[n], v // step[n] * step[n]) if n in step else v

    def make(pick: Callable[[int, str], int]) -> Sizes:
        return tied({**bench, **{n: value(n, pick(i, n)) for i, n in enumerate(names)}}, ties or {})

    together = [
        make(lambda i, n: odd(large[n])),
        make(lambda i, n: large[n]),
        make(lambda i, n: odd(large[n] // 3 + 2 * i)),
        make(lambda i, n: SMALL[(i + 4) % len(SMALL)] + 2 * large[n] // 7),
        make(lambda i, n: SMALL[i % len(SMALL)]),
        make(lambda i, n: 1),
        make(lambda i, n: 2 if i % 2 else 1),
        make(lambda i, n: large[n] // 4 + 1),
        make(lambda i, n: SMALL[(i + 2) % len(SMALL)]),
    ]
    alone = [tied({**large, n: value(n, pick(large[n]))}, ties or {}) for pick in ALONE for n in names]
    unique: list[Sizes] = []
    for sizes in together + alone:
        if sizes not in unique and sizes != bench:
            unique.append(sizes)
    return unique


# One size's values with the others at the largest test size: an odd third, a non-multiple
# half, tiny odd primes and 1, a few of each size in turn.
ALONE: tuple[Callable[[int], int], ...] = (
    lambda v: odd(v // 3), lambda v: 3, lambda v: v // 2 + 1, lambda v: 1, lambda v: 5, lambda v: 7, lambda v: 13)
