"""Run a problem file at one size: shapes and FLOPs on the meta device, values on the CPU.

Shapes come from the meta device (no memory, any size, the benchmark size included); values
come from real CPU runs at the small test sizes only: the float32 forward PyTorch computes, the
float64 reference, a second float32 run under another seed (random ops in forward differ) and
float16 / bfloat16 emulations (inputs, weights and outputs rounded) for the tolerance checks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from fsr.kernelbench import runtime


class ProblemError(Exception):
    """Why a file cannot become a task: one line."""


@dataclass(frozen=True)
class Tensor:
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name
    is_bool: bool = False  # torch.bool, held by the task as uint8


@dataclass(frozen=True)
class Shapes:
    """Everything a task's signature needs at one size."""

    inputs: tuple[Tensor, ...]
    state: tuple[tuple[str, Tensor], ...]  # module path, tensor
    outputs: tuple[Tensor, ...]
    flops: int
    numbers: tuple[tuple[int, float], ...] = ()  # numbers get_inputs gives: (position, value)


@dataclass(frozen=True)
class Values:
    """Outputs at one test size: float64 reference, PyTorch float32, and the emulations."""

    reference: tuple[np.ndarray, ...]
    float32: tuple[np.ndarray, ...]
    float16: tuple[np.ndarray, ...]
    bfloat16: tuple[np.ndarray, ...]


def _tensor(t: Any) -> Tensor:
    import torch

    name = str(t.dtype).removeprefix("torch.")
    if t.dtype not in (torch.bool, torch.float32, torch.float64, torch.float16, torch.int32, torch.int64, torch.uint8, torch.int8):
        raise ProblemError(f"a tensor of dtype {name} (fsr's kernels take float, int and uint8 buffers)")
    shape = tuple(int(d) for d in t.shape) or (1,)
    return Tensor(shape, "uint8", True) if name == "bool" else Tensor(shape, name)


def shapes(source: str, sizes: dict[str, int]) -> Shapes:
    """Shapes, dtypes and FLOPs at `sizes`, on the meta device; raises ProblemError. Kept per
    sizes: the importer asks for the same sizes many times (shrinking, ties, test sizes, fits),
    and one meta forward of a recurrent module at its file's sizes takes tens of seconds (a
    Python meta function per op per time step)."""
    found = _shapes(source, tuple(sizes.items()))
    if isinstance(found, str):
        raise ProblemError(found)
    return found


@functools.lru_cache(maxsize=1024)
def _shapes(source: str, sizes: tuple[tuple[str, int], ...]) -> Shapes | str:
    """Shapes at `sizes`, or why there are none."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    try:
        namespace = runtime.load(source, dict(sizes))
        with torch.device("meta"):
            model, inputs = runtime.build(namespace, 0)
            for i, x in enumerate(inputs):
                if not isinstance(x, torch.Tensor | int | float) or isinstance(x, bool):
                    return f"get_inputs()[{i}] is a {type(x).__name__}, not a tensor or a number"
            counter = FlopCounterMode(display=False)
            with torch.no_grad(), counter:
                results = runtime.outputs(model(*inputs))
        return Shapes(tuple(_tensor(x) for x in inputs if isinstance(x, torch.Tensor)),
                      tuple((p, _tensor(t)) for p, t in runtime.state(model).items()),
                      tuple(_tensor(y) for y in results), int(counter.get_total_flops()),
                      tuple((i, float(x)) for i, x in enumerate(inputs) if not isinstance(x, torch.Tensor)))
    except ProblemError as e:
        return str(e)
    except Exception as e:
        return _why(e)


def _why(e: BaseException) -> str:
    text = " ".join(str(e).split())[:200]
    lower = text.lower()
    if "data-dependent" in lower or "data-independent" in lower or "meta" in lower and "item" in lower:
        return f"data-dependent shapes or values ({type(e).__name__}: {text})"
    return f"{type(e).__name__}: {text}"


def values(source: str, layout: dict[str, Any], sizes: dict[str, int]) -> Values:
    """The outputs at `sizes` (small) on the CPU; raises ProblemError for random ops in forward."""
    import torch

    try:
        arrays = runtime.draw(source, layout, sizes, np.random.default_rng(0))
        float32 = _forward32(source, layout, arrays, sizes, seed=1)
        again = _forward32(source, layout, arrays, sizes, seed=2)
        reference = [t.numpy() for t in runtime.forward64(runtime.load(source, sizes), layout, arrays)]
        half = [_rounded(t, torch.float16) for t in
                runtime.forward64(runtime.load(source, sizes), layout, _round_all(arrays, torch.float16))]
        brain = [_rounded(t, torch.bfloat16) for t in
                 runtime.forward64(runtime.load(source, sizes), layout, _round_all(arrays, torch.bfloat16))]
    except ProblemError:
        raise
    except Exception as e:
        raise ProblemError(_why(e)) from None
    if any(not np.array_equal(a, b, equal_nan=True) for a, b in zip(float32, again, strict=True)):
        raise ProblemError("random ops in forward: two runs on the same inputs disagree")
    return Values(tuple(reference), tuple(float32), tuple(half), tuple(brain))


def _forward32(source: str, layout: dict[str, Any], arrays: dict[str, np.ndarray], sizes: dict[str, int],
               seed: int) -> list[np.ndarray]:
    """PyTorch's own float32 forward on these inputs and weights."""
    import torch

    model, _ = runtime.build(runtime.load(source, sizes), 0)
    for name, p in layout["state"]:
        runtime.assign(model, p, torch.from_numpy(arrays[name].copy()))
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        results = runtime.outputs(model(*runtime.call_args(layout, lambda n: _tensor_of(layout, arrays, n))))
    return [t.detach().numpy().copy() for t in results]


def _tensor_of(layout: dict[str, Any], arrays: dict[str, np.ndarray], name: str) -> Any:
    import torch

    t = torch.from_numpy(arrays[name].copy())
    return t.bool() if name in layout["bools"] else t


def _round_all(arrays: dict[str, np.ndarray], dtype: Any) -> dict[str, np.ndarray]:
    import torch

    return {k: torch.from_numpy(a).to(dtype).to(torch.float32).numpy() if a.dtype.kind == "f" else a
            for k, a in arrays.items()}


def _rounded(t: Any, dtype: Any) -> np.ndarray:
    return t.to(dtype).double().numpy() if t.is_floating_point() else t.numpy()
