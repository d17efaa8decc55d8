"""From a problem file to a plan of its task: sizes, signature, test sizes, shapes, tolerance.

Everything here is measured by running the module: shapes and FLOPs on the meta device at every
size (the benchmark size included, which may not fit this machine), values on the CPU at the
test sizes only.
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from fsr import dtypes
from fsr.files import read_input
from fsr.kernelbench import DEFAULT_MAX_BENCH_BYTES, fit, poly, precision, probe, runtime, scale, sizes
from fsr.kernelbench.probe import ProblemError, Shapes, Values
from fsr.kernelbench.stress import Set as StressSet
from fsr.kernelbench.stress import tried as stress_sets

LARGE_ELEMENTS = 2**20  # the largest test size: inputs, weights and outputs together
LARGE_FLOPS = 2 * 10**7  # float64 convolutions on a CPU: about 0.1 s
MARGIN = 32  # tolerance over the float32 error PyTorch's own forward makes
RTOL = 1e-5
# No size past these runs on the CPU (where shrinking stops short: a file's fixed sizes keep it
# large); test sizes run five forwards each, float64 among them, on one thread. A VGG16 on one
# 224 x 224 image (138M weights, 3 x 10^10 FLOPs) takes about 15 s a size and 3 GB.
CPU_ELEMENTS = 2**28
CPU_FLOPS = 4 * 10**10
WANTED, LEAST = 6, 5  # test sizes kept; fewer than LEAST and the file is skipped


@dataclass(frozen=True)
class Arg:
    name: str
    dtype: str
    shape: tuple[str, ...]
    intent: str
    path: str = ""  # module path of a weight or buffer


@dataclass(frozen=True)
class Plan:
    bench: dict[str, int]
    test_sizes: tuple[dict[str, int], ...]
    args: tuple[Arg, ...]
    layout: dict[str, Any]
    bytes_expr: str
    flops_expr: str
    atol: float
    rtol: float
    note: str  # "" or how atol was capped below what half precision passes (precision.below_half)
    file_bench: dict[str, int]  # the file's own sizes: `bench` unless they pass max_bench_bytes
    file_bench_bytes: int  # the arguments' bytes at file_bench
    max_bench_bytes: int  # the bound the benchmark size was fitted to (0: none)
    ties: dict[str, str]  # a size kept equal to another at every size (follower -> leader)
    dtype: str = "float32"  # what the floating arguments are cast to (`fsr import --dtype`)
    tolerance: str = ""  # a low-precision dtype's default tolerance, its label; "" for float32
    stress: tuple[StressSet, ...] = ()  # the scaled sets tried: declared, or left out and why

    @property
    def scaled(self) -> str:
        """'' or what the import line says of a benchmark size scaled down to fit."""
        return scale.note(self.file_bench, self.bench, self.file_bench_bytes, self.max_bench_bytes)


def plan(path: Path, max_bench_bytes: int = DEFAULT_MAX_BENCH_BYTES, dtype: str = "float32") -> Plan:
    """The plan of `path`'s task, its benchmark size fitted to `max_bench_bytes` of arguments (0:
    the file's sizes whatever they hold), its floating arguments in `dtype` (float32, float16 or bfloat16);
    raises ProblemError with the one-line reason it has none."""
    source = read_input(path)
    bench = sizes.constants(source)
    if not bench:
        raise ProblemError("no module-level integer sizes")
    namespace = _namespace(source, bench)
    at_bench = probe.shapes(source, bench)
    layout = _layout(namespace, at_bench, list(bench))
    if dtype != "float32":
        layout["dtype"] = dtype
    ties = _ties(source, bench, at_bench)
    tests, vals = _test_sizes(source, bench, at_bench, layout, ties)
    points = [(s, probe.shapes(source, s)) for s in tests] + [(bench, at_bench)] + _probes(source, bench, tests[-1], at_bench, ties)
    args = tuple(replace(a, dtype=precision.lowered(dtype, a.dtype)) for a in _args(layout, at_bench, points, bench))
    fitted = scale.fit(source, bench, args, max_bench_bytes, lambda s: _same_signature(s, at_bench), ties)
    if fitted != bench:
        points.append((fitted, probe.shapes(source, fitted)))
    atol, rtol, note = _tolerance(vals)
    label, tolerance = "", dtypes.Tolerance(atol, rtol)
    if dtype != "float32":  # the dtype's default tolerance replaces float32's, once PyTorch passes it
        tol, tests = precision.check(source, layout, tests, [a.dtype for a in args if a.intent == "out"])
        if tol is not None:
            atol, rtol, note, label, tolerance = tol.atol, tol.rtol, "", tol.label(), tol
    return Plan(fitted, tests, args, layout, _bytes(args, points, fitted), _flops(points, args, fitted), atol, rtol,
                note, bench, scale.argument_bytes(args, bench), max_bench_bytes, ties, dtype, label,
                stress_sets(source, layout, args, tests, tolerance))


def _namespace(source: str, bench: dict[str, int]) -> dict[str, Any]:
    try:
        namespace = runtime.load(source, bench)
    except Exception as e:
        raise ProblemError(f"running the file raised {type(e).__name__}: {' '.join(str(e).split())[:150]}") from None
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not callable(namespace.get(name)):
            raise ProblemError(f"no {name} (a KernelBench file defines Model, get_inputs and get_init_inputs)")
    return namespace


def _layout(namespace: dict[str, Any], shapes: Shapes, size_names: list[str]) -> dict[str, Any]:
    """Task argument names: forward's parameter names, module paths, out / out0, out1, ..."""
    params = [p.name for p in inspect.signature(namespace["Model"].forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][1:]
    taken = set(size_names)

    def unique(text: str) -> str:
        name = re.sub(r"\W", "_", text)
        name = name if name.isidentifier() else f"t_{name}"
        while name in taken:
            name += "_"
        taken.add(name)
        return name

    count = len(shapes.inputs) + len(shapes.numbers)
    inputs = [unique(params[i] if i < len(params) else f"input{i}") for i in range(count)]
    constants = {inputs[i]: value for i, value in shapes.numbers}
    state = [[unique(p), p] for p, _ in shapes.state]
    outputs = [unique("out" if len(shapes.outputs) == 1 else f"out{i}") for i in range(len(shapes.outputs))]
    bools = [n for n, t in zip([n for n in inputs if n not in constants], shapes.inputs, strict=True) if t.is_bool]
    bools += [n for (n, _), (_, t) in zip(state, shapes.state, strict=True) if t.is_bool]
    return {"inputs": inputs, "constants": constants, "state": state, "outputs": outputs, "bools": bools}


def _same_signature(a: Shapes, b: Shapes) -> bool:
    return (len(a.inputs) == len(b.inputs) and len(a.outputs) == len(b.outputs) and a.numbers == b.numbers
            and [(p, t.shape.__len__(), t.dtype) for p, t in a.state] == [(p, len(t.shape), t.dtype) for p, t in b.state]
            and [(len(t.shape), t.dtype) for t in a.inputs + a.outputs] == [(len(t.shape), t.dtype) for t in b.inputs + b.outputs])


def _cost(s: Shapes) -> tuple[int, int]:
    tensors = list(s.inputs) + [t for _, t in s.state] + list(s.outputs)
    return sum(math.prod(t.shape) for t in tensors), s.flops


def _ties(source: str, bench: dict[str, int], at_bench: Shapes) -> sizes.Ties:
    """Sizes equal at the file's values that the module accepts only together (a depthwise
    convolution's in and out channels): each follower and the size bound before it. Checked at
    the sizes shrunk without ties (where such a pair stays at the file's values, the others
    small): a probe near the file's sizes can take a minute (a recurrent module's time steps)."""
    def runs(s: dict[str, int]) -> bool:
        return _too_big(source, at_bench, s) is not None

    names = sizes.scaling(bench)
    base = sizes.shrink(bench, names, lambda s: _too_big(source, at_bench, s))
    ties: sizes.Ties = {}
    for i, leader in enumerate(names):
        for n in names[i + 1:]:
            v = base[n] // 2 + 1  # odd where the value is a power of two: a divisor fails
            if (leader not in ties and n not in ties and bench[n] == bench[leader] == base[n] == base[leader] > 1
                    and not (runs({**base, leader: v}) and runs({**base, n: v})) and runs({**base, leader: v, n: v})):
                ties[n] = leader
    return ties


def _fails(source: str, s: dict[str, int], bench: dict[str, int]) -> str:
    """Why the sizes `s` do not run with the benchmark size's signature, naming the sizes that
    differ from the file's (a broadcast that holds only at the file's sizes shows here)."""
    at = ", ".join(f"{n} = {v}" for n, v in s.items() if v != bench[n])
    try:
        probe.shapes(source, s)
    except ProblemError as e:
        return f"at {at}: {e}"
    return f"at {at} the arguments' number, ranks or dtypes differ from those at the file's sizes"


def _too_big(source: str, at_bench: Shapes, s: dict[str, int], ties: sizes.Ties | None = None,
             elements_max: int = LARGE_ELEMENTS, flops_max: int = LARGE_FLOPS) -> bool | None:
    """Whether `s` (followers set) passes the bounds; None where it does not run with the
    benchmark size's signature."""
    s = sizes.tied(s, ties or {})
    try:
        shapes = probe.shapes(source, s)
    except ProblemError:
        return None
    if not _same_signature(shapes, at_bench):
        return None
    elements, flops = _cost(shapes)
    return elements > elements_max or flops > flops_max


def _test_sizes(source: str, bench: dict[str, int], at_bench: Shapes, layout: dict[str, Any],
                ties: sizes.Ties) -> tuple[tuple[dict[str, int], ...], list[Values]]:
    """Test sizes that run on the CPU with the benchmark size's signature, smallest first."""
    names = [n for n in sizes.scaling(bench) if n not in ties]

    def too_big(s: dict[str, int], elements_max: int = LARGE_ELEMENTS, flops_max: int = LARGE_FLOPS) -> bool | None:
        return _too_big(source, at_bench, s, ties, elements_max, flops_max)

    large = sizes.shrink(bench, names, too_big, ties)
    step = {}
    for n in names:
        if large[n] % 2 == 0 and too_big({**large, n: large[n] + 1}) is None:
            step[n] = _step(bench[n], lambda v, n=n: too_big({**large, n: v}) is not None)
    kept: list[tuple[dict[str, int], Values]] = []
    reasons: list[str] = []
    for s in sizes.candidates(bench, names, large, step, ties):
        verdict = too_big(s, CPU_ELEMENTS, CPU_FLOPS)
        if verdict is not False:  # it does not run, or it is too large to run on the CPU
            reasons.append("the sizes that run are too large to run on the CPU" if verdict
                           else _fails(source, sizes.tied(s, ties), bench))
            continue
        try:
            kept.append((s, probe.values(source, layout, s)))
        except ProblemError as e:
            if str(e).startswith("random ops"):
                raise
            reasons.append(str(e))
        if len(kept) == WANTED:
            break
    if len(kept) < LEAST:
        if not reasons and names:  # every candidate came out as the file's sizes: no other runs
            half = sizes.tied({**bench, names[0]: bench[names[0]] // 2}, ties)
            reasons.append(f"no sizes but the file's run; {_fails(source, half, bench)}")
        why = f": {reasons[0]}" if reasons else ""
        raise ProblemError(f"only {len(kept)} test sizes run (at least {LEAST} needed){why}")
    kept.sort(key=lambda sv: _cost(probe.shapes(source, sv[0])))
    return tuple(s for s, _ in kept), [v for _, v in kept]


def _step(bench: int, runs: Any) -> int:
    """The smallest power of two whose odd multiples run (GroupNorm's channels: the group count)."""
    for k in range(1, (bench & -bench).bit_length()):
        if runs(3 * 2**k if 3 * 2**k <= bench else 2**k):
            return 2**k
    return bench & -bench


def _probes(source: str, bench: dict[str, int], large: dict[str, int], at_bench: Shapes,
            ties: sizes.Ties) -> list[tuple[dict[str, int], Shapes]]:
    """Shapes one, two and three past the largest test size in each size alone (with its
    followers): they pin down the offsets of floor divisions."""
    out = []
    for n in sizes.scaling(bench):
        for d in (1, 2, 3):
            s = sizes.tied({**large, n: large[n] + d}, ties)
            try:
                shapes = probe.shapes(source, s)
            except ProblemError:
                continue
            if _same_signature(shapes, at_bench):
                out.append((s, shapes))
    return out


def _dims(points: list[tuple[dict[str, int], Shapes]], pick: Any, bench: dict[str, int], what: str) -> tuple[str, ...]:
    rank = len(pick(points[0][1]).shape)
    fixed = {n: v for n, v in bench.items() if len({p[n] for p, _ in points}) == 1}
    dims = []
    for d in range(rank):
        found = fit.fit([(p, pick(s).shape[d]) for p, s in points], list(bench), fixed)
        if found is None:
            raise ProblemError(f"{what}: dimension {d} is no expression of the sizes fsr can write")
        dims.append(found)
    return tuple(dims)


def _args(layout: dict[str, Any], at_bench: Shapes, points: list[tuple[dict[str, int], Shapes]],
          bench: dict[str, int]) -> tuple[Arg, ...]:
    tensors = [n for n in layout["inputs"] if n not in layout["constants"]]
    args = [Arg(n, t.dtype, _dims(points, lambda s, i=i: s.inputs[i], bench, n), "in")
            for i, (n, t) in enumerate(zip(tensors, at_bench.inputs, strict=True))]
    args += [Arg(n, t.dtype, _dims(points, lambda s, i=i: s.state[i][1], bench, n), "in", p)
             for i, ((n, p), (_, t)) in enumerate(zip(layout["state"], at_bench.state, strict=True))]
    args += [Arg(n, t.dtype, _dims(points, lambda s, i=i: s.outputs[i], bench, n), "out")
             for i, (n, t) in enumerate(zip(layout["outputs"], at_bench.outputs, strict=True))]
    return tuple(args)


def _bytes(args: tuple[Arg, ...], points: list[tuple[dict[str, int], Shapes]], bench: dict[str, int]) -> str:
    """Each argument read or written once, collected into one polynomial of the sizes; the
    fixed-size arguments summed into its constant."""
    fixed, terms = 0, []
    for arg in args:
        size = np.dtype(arg.dtype).itemsize
        if all(d.isdigit() or d in bench and len({p[d] for p, _ in points}) == 1 for d in arg.shape):
            fixed += size * math.prod(int(d) if d.isdigit() else bench[d] for d in arg.shape)
        else:
            terms.append(poly.product([{(): size}, *(poly.of(d) for d in arg.shape)]))
    return poly.text(poly.total([*terms, {(): fixed}]))


def _flops(points: list[tuple[dict[str, int], Shapes]], args: tuple[Arg, ...], bench: dict[str, int]) -> str:
    """FLOPs as PyTorch's counter counts them (matmuls, convolutions, attention): an expression
    where one fits every size, else the count at the benchmark size, where fsr uses it."""
    found = fit.fit([(p, s.flops) for p, s in points], list(bench))
    return found if found is not None else str(_bench_flops(points, bench))


def _bench_flops(points: list[tuple[dict[str, int], Shapes]], bench: dict[str, int]) -> int:
    return next(s.flops for p, s in points if p == bench)


def _tolerance(vals: list[Values]) -> tuple[float, float, str]:
    """atol and rtol: MARGIN times the float32 error of PyTorch's forward, exact for integers."""
    refs = [r for v in vals for r in v.reference]
    if any(not np.all(np.isfinite(r)) for r in refs if r.dtype.kind == "f"):
        raise ProblemError("the float64 reference has NaN or infinity at a test size")
    if all(r.dtype.kind in "iu" for r in refs):
        return 0.5, 1e-12, ""
    scale = max(float(np.max(np.abs(r), initial=0.0)) for r in refs)
    if scale == 0.0:
        raise ProblemError("the outputs are zero at every test size (a degenerate problem)")
    err = max(float(np.max(np.abs(f.astype(np.float64) - r), initial=0.0))
              for v in vals for f, r in zip(v.float32, v.reference, strict=True))
    atol = float(f"{max(MARGIN * err, 16 * 2.0**-24 * scale):.3g}")

    errors = {dtype: precision.least_atol([o for v in vals for o in getattr(v, dtype)],
                                          [r for v in vals for r in v.reference], RTOL)
              for dtype in ("float32", *precision.HALVES)}
    if errors["float32"] > atol:
        raise ProblemError("PyTorch's own float32 output fails the tolerance derived from it")
    atol, note = precision.below_half(errors, atol, scale)  # a half-precision kernel must fail it
    return atol, RTOL, note
