"""The stress sets an imported task declares (task.toml `[[stress]]`, docs/judge.md "Stress
sets"): every floating-point input, weights included, scaled by 64 and by 2^-10, at the largest
test size whose inputs fsr draws when the task loads (fsr.tasks.CHECK_ELEMENTS).

Powers of two, not 64 and 1e-3 as such: a float times a power of two is exact (barring overflow
and subnormals), so the stressed inputs are the usual ones, moved in magnitude only, and the
float64 reference of the mapped inputs is the reference of the inputs a kernel is given. 2^-10
(about 9.8e-4) is the power of two nearest 1e-3.

A KernelBench module is any op, so the importer cannot know which scales its domain allows; it
asks PyTorch. A set is declared only where PyTorch's own forward in the task's dtype, on the
mapped inputs, meets the task's tolerance against the float64 reference of those inputs, the
reference is finite and not zero, and an output of zeros fails that tolerance (an absolute atol
over the shrunken outputs would pass anything small). Otherwise the set is left out, with why:
a float32 matmul's error grows with its inputs' scale past an atol measured at the usual scale,
and no kernel fsr certifies should be held to what PyTorch itself misses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fsr import dtypes, expr
from fsr.kernelbench import cast, precision
from fsr.kernelbench.probe import _why

SETS = (("inputs x64", 64.0), ("inputs x2^-10", 2.0**-10))


@dataclass(frozen=True)
class Set:
    """One scaled set the importer tried: declared where `why` is "", else left out for `why`."""

    name: str
    scale: float
    size: tuple[tuple[str, int], ...]
    why: str = ""


def check_size(args: tuple[Any, ...], tests: tuple[dict[str, int], ...]) -> dict[str, int] | None:
    """The largest test size whose inputs (plan.Arg shapes) hold at most fsr.tasks.CHECK_ELEMENTS
    elements, the most the task's load draws to check a stress set; None where none does."""
    from fsr.tasks import CHECK_ELEMENTS

    def elements(size: dict[str, int]) -> int:
        return sum(math.prod(int(expr.evaluate(d, size)) for d in a.shape) for a in args if a.intent == "in")

    fitting = [s for s in tests if elements(s) <= CHECK_ELEMENTS]
    return max(fitting, key=elements) if fitting else None


def tried(source: str, layout: dict[str, Any], args: tuple[Any, ...], tests: tuple[dict[str, int], ...],
          tol: dtypes.Tolerance) -> tuple[Set, ...]:
    """Each of SETS, declared or left out (why), for the task of `layout` with tolerance `tol`."""
    size = check_size(args, tests)
    floating = any(a.intent == "in" and a.dtype in dtypes.FLOAT for a in args)
    why = "" if floating else "no floating-point input"
    if not why and size is None:
        why = "no test size within the inputs drawn at load"
    found = []
    for name, factor in SETS:
        at = size or dict(tests[-1])
        found.append(Set(name, factor, tuple(at.items()), why or verdict(source, layout, at, factor, tol)))
    return tuple(found)


def verdict(source: str, layout: dict[str, Any], size: dict[str, int], factor: float, tol: dtypes.Tolerance) -> str:
    """"" where PyTorch's forward meets `tol` on the inputs scaled by `factor`, else why not."""
    dtype = layout.get("dtype", "float32")
    cast._MODULE.clear()  # the comparators' model is kept per sizes: here its weights change
    try:
        refs, got = precision.outputs_in(source, layout, size, factor)
    except precision.Overflow as e:
        return f"an input overflows ({e})"
    except Exception as e:  # the file is user code
        return f"PyTorch's {dtype} forward raises {_why(e)}"
    finally:
        cast._MODULE.clear()
    floats = [r for r in refs if r.dtype.kind == "f"]
    if not all(np.isfinite(r).all() for r in floats):
        return "the float64 reference is not finite"
    if any(dtypes.magnitude(r) == 0 for r in refs):
        return "an output is zero"
    if all(bool((np.abs(r) <= dtypes.bounds(r, tol)).all()) for r in floats) and floats:
        return "an output of zeros passes the tolerance"
    if not all(np.isfinite(g).all() for g in got if g.dtype.kind == "f"):
        return f"PyTorch's {dtype} forward is not finite"
    worst = precision.worst(refs, got, tol)
    return "" if worst <= 1 else f"PyTorch's {dtype} forward fails the tolerance ({worst:.3g} times the bound)"


def summary(sets: tuple[Set, ...]) -> str:
    """What the import line says: the sets declared, those left out and why ("" for none tried)."""
    declared = [s.name for s in sets if not s.why]
    out = [f"{s.name} ({s.why})" for s in sets if s.why]
    parts = ([f"stress sets {', '.join(declared)}"] if declared else ["no stress set"]) + (
        [f"left out {'; '.join(out)}"] if out else [])
    return ", ".join(parts) if sets else ""


def toml(sets: tuple[Set, ...], dtype: str) -> list[str]:
    """task.toml's `[[stress]]` tables of the declared sets, under a comment naming those left out."""
    lines = ["", f"# Stress sets (docs/judge.md): every floating-point input, weights too, scaled by a power of two, "
                 f"where PyTorch's own {dtype} forward meets the task's tolerance on them (docs/import.md)"]
    lines += [f"# left out: {s.name}: {s.why}" for s in sets if s.why]
    for s in sets:
        if not s.why:
            lines += ["[[stress]]", f"name = \"{s.name}\"", f"scale = {s.scale!r}",
                      "size = { " + ", ".join(f"{k} = {v}" for k, v in s.size) + " }"]
    return lines if sets else []
