"""The checks of an import in float16 or bfloat16 (`fsr import --dtype`): the task's outputs take
that dtype's default tolerance (fsr.dtypes: relative, with a magnitude floor), and PyTorch's own
module run in the dtype, as the task's comparators run it (cast.py), must pass it against the
float64 reference of the rounded inputs at every test size; a problem whose module does not (it
cannot run in that dtype, or its outputs are too sensitive for it) is skipped saying so.

And the float32 counterpart (`below_half`): a float32 task's tolerance, derived from PyTorch's own
float32 error, must still fail a float16- or bfloat16-rounded result, or a half-precision kernel
would be judged correct on it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fsr import dtypes, tasks
from fsr.kernelbench import cast, runtime
from fsr.kernelbench.probe import ProblemError, _why
from fsr.kernelbench.runtime import outputs

LEAST = 5  # plan.LEAST: test sizes a task needs


def lowered(dtype: str, tensor_dtype: str) -> str:
    """An argument's dtype in a task imported in `dtype`: floating ones are cast to it (KernelBench
    casts float64 tensors too), integers and bools keep theirs."""
    return dtype if dtype != "float32" and tensor_dtype in ("float32", "float64", "float16") else tensor_dtype


def outputs_in(source: str, layout: dict[str, Any], sizes: dict[str, int],
               scale: float = 1.0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The float64 reference and PyTorch's forward in the layout's dtype (as float64; float32
    where the layout names none) at `sizes`, every floating input and weight multiplied by
    `scale` first and rounded back to its dtype, as a stress set maps them (fsr.tasks.stress_inputs).
    Raises Overflow where that leaves one non-finite."""
    import torch

    low = layout.get("dtype", "float32") != "float32"
    draw, reference, module = ((cast.cast_draw, cast.cast_reference, cast.cast_module) if low
                               else (runtime.draw, runtime.reference64, runtime.module32))
    arrays = draw(source, layout, sizes, np.random.default_rng(0))
    if scale != 1.0:
        arrays = {k: scaled(a, scale) if a.dtype.name in dtypes.FLOAT else a for k, a in arrays.items()}
    ref = reference(source, layout, {k: a.copy() for k, a in arrays.items()}, sizes)
    model, activations = module(source, layout, arrays, sizes)
    with torch.no_grad():
        got = [t.detach().to(torch.float64).numpy() if t.is_floating_point() else t.numpy()
               for t in outputs(model(*activations))]
    return [ref[n] for n in layout["outputs"]], got


class Overflow(Exception):
    """A scaled input is not finite in its dtype."""


def scaled(a: np.ndarray, scale: float) -> np.ndarray:
    """`a * scale` rounded back to `a`'s dtype, as a stress set maps it (fsr.tasks.stress_mapped);
    raises Overflow where that is not finite."""
    mapped = tasks.stress_mapped(a, scale)
    if mapped is None:
        raise Overflow(f"{a.dtype} x {scale:g} is not finite")
    return mapped


def worst(refs: list[np.ndarray], got: list[np.ndarray], tol: dtypes.Tolerance) -> float:
    """The largest |got - ref| over its bound (fsr.dtypes.bounds) across the outputs: at most 1
    where `got` meets `tol`; inf where an element of `got` is NaN or infinite."""
    most = 0.0
    for ref, out in zip(refs, got, strict=True):
        with np.errstate(divide="ignore", invalid="ignore"):
            excess = np.abs(out.astype(np.float64) - ref) / dtypes.bounds(ref, tol)
        most = max(most, float(np.max(np.nan_to_num(excess, nan=np.inf), initial=0.0)))
    return most


def check(source: str, layout: dict[str, Any], tests: tuple[dict[str, int], ...],
          out_dtypes: list[str]) -> tuple[dtypes.Tolerance | None, tuple[dict[str, int], ...]]:
    """The dtype's default tolerance of floating outputs (None for integer ones: they compare
    exactly, as in float32) and the test sizes kept: those where a floating output's reference is
    all zeros are dropped (a relative tolerance of zeros passes anything close to zero, and
    fsr refuses such a task). Raises ProblemError where PyTorch in the dtype fails the tolerance at
    a test size, or fewer than `LEAST` test sizes are left."""
    dtype = layout["dtype"]
    floats = [d for d in out_dtypes if d == dtype]
    if floats and len(floats) != len(out_dtypes):
        raise ProblemError(f"outputs both floating and integer have no one tolerance in {dtype}")
    default = dtypes.default_tolerance(out_dtypes)
    tol = default or dtypes.Tolerance(0.5, 1e-12)  # integers: exact
    kept = []
    cast._MODULE.clear()
    for s in tests:
        try:
            refs, got = outputs_in(source, layout, s)
        except Exception as e:
            raise ProblemError(f"PyTorch's module in {dtype} does not run: {_why(e)}") from None
        if default is not None and any(dtypes.magnitude(r) == 0 for r in refs):
            continue
        excess = worst(refs, got, tol)
        if not excess <= 1:  # NaN (an overflow in the dtype) fails too
            raise ProblemError(f"PyTorch's own {dtype} forward fails {dtype}'s tolerance ({tol.label()}) at "
                               f"{', '.join(f'{k} = {v}' for k, v in s.items())}: {excess:.3g} times the bound")
        kept.append(s)
    cast._MODULE.clear()
    if len(kept) < LEAST:
        raise ProblemError(f"only {len(kept)} test sizes have outputs other than zeros in {dtype} "
                           f"(at least {LEAST} needed)")
    return default, tuple(kept)


# A float32 task's atol capped below what half precision passes keeps at least this factor over
# float32's own error (32 where nothing is capped: plan.MARGIN), so a float32 kernel that sums
# in another order than PyTorch still passes.
F32_MARGIN_LEAST = 4
HALVES = ("float16", "bfloat16")


def least_atol(outs: list[np.ndarray], refs: list[np.ndarray], rtol: float) -> float:
    """The smallest atol at which `outs` pass against `refs` with `rtol` (inf where one is NaN or
    infinite: no atol passes it)."""
    worst = -np.inf
    for out, ref in zip(outs, refs, strict=True):
        with np.errstate(invalid="ignore"):
            excess = np.abs(np.asarray(out, np.float64) - ref) - rtol * np.abs(ref)
        worst = max(worst, float(np.max(np.nan_to_num(excess, nan=np.inf), initial=-np.inf)))
    return worst


def below_half(errors: dict[str, float], atol: float, scale: float) -> tuple[float, str]:
    """A float32 task's atol that no float16- or bfloat16-rounded result passes (inputs, weights
    and outputs rounded: the least a half-precision kernel errs), from each dtype's least passing
    atol in `errors` ("float32", "float16", "bfloat16"): `atol` itself where neither passes it,
    else one capped to the geometric mean of float32's error and theirs, with the note that says
    so. Raises ProblemError where no atol keeps F32_MARGIN_LEAST over float32 and stays below them."""
    passing = [d for d in HALVES if errors[d] <= atol]
    if not passing:
        return atol, ""
    lowest = min(HALVES, key=lambda d: errors[d])
    low = errors[lowest]
    base = max(errors["float32"], 2.0**-24 * scale)  # at least one float32 ulp of the largest output
    if low < F32_MARGIN_LEAST**2 * base:
        raise ProblemError(f"{' and '.join(passing)} emulation (inputs, weights and outputs rounded) passes "
                           f"any tolerance float32 needs: PyTorch's float32 forward errs by up to {base:.3g}, "
                           f"{lowest} emulation by only {low:.3g} (a half-precision kernel would pass)")
    capped = float(f"{math.sqrt(base * low):.3g}")
    return capped, (f"atol capped from {atol:.3g} (which {' and '.join(passing)} emulation passes, erring by "
                    f"{low:.3g}) to {capped:.3g}, {capped / base:.3g} times float32's error")
