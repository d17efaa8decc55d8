"""An exported kernel against its task's reference: inputs from the task's `make_inputs`, each
call's outputs filled with NaN bytes first (so an element the kernel leaves unwritten fails),
every element compared with the float64 reference within the task's tolerance, as fsr checks.

The reference is the task's reference.py, embedded in the module as text when it was exported:
the module then runs where fsr and its tasks are not, and checks against the reference the
kernel was judged by, not a task folder edited since. It is loaded only by `check`.

Copied into every exported module after fsr/export/calls.py (the export drops the line that
imports it from fsr).
"""

from __future__ import annotations

import importlib.util
import math
import types
from typing import Any

import numpy as np

from fsr.export.calls import Kernel  # fsr-only
from fsr.export.runtime import POISON, Arg, label  # fsr-only


def reference_module(kernel: Kernel) -> types.ModuleType:
    """The task's reference.py (make_inputs, reference), loaded from the embedded text once."""
    if kernel.reference is None:
        spec = kernel.spec
        module = types.ModuleType(f"reference_{spec.task}")
        module.__file__ = spec.reference_path  # tracebacks name the file it was copied from
        exec(compile(spec.reference_source, spec.reference_path, "exec"), module.__dict__)  # written by people
        kernel.reference = module
    return kernel.reference


def bounds(reference: np.ndarray, atol: float, rtol: float, floor: float) -> np.ndarray:
    """Each element's allowed deviation: atol + rtol * max(|ref|, floor * mean |ref|), the mean over
    the finite elements (fsr.dtypes.bounds)."""
    ref = np.abs(np.asarray(reference, dtype=np.float64))
    if floor > 0:
        finite = ref[np.isfinite(ref)]
        ref = np.maximum(ref, floor * (float(finite.mean()) if finite.size else 0.0))
    return atol + rtol * ref


def error_ratio(got: np.ndarray, reference: np.ndarray, tolerance: tuple[float, float, float]) -> float:
    """The worst |got - ref| / bound: 1 is the tolerance; NaN, or a miss where the bound is 0, is
    infinity."""
    ref = np.asarray(reference, dtype=np.float64)
    diff = np.abs(np.asarray(got).astype(np.float64) - ref)
    if diff.size == 0:
        return 0.0
    if np.isnan(diff).any():
        return math.inf
    bound = bounds(ref, *tolerance)
    return float(np.divide(diff, bound, out=np.where(diff > 0, np.inf, 0.0), where=bound > 0).max())


def host_dtype(arg: Arg) -> np.dtype:
    """The host dtype of an argument: bfloat16 and fp8 through ml_dtypes (as the reference has them)."""
    if arg.dtype != arg.cupy_dtype:
        import ml_dtypes  # noqa: F401  # registers bfloat16 and the fp8 dtypes with NumPy
    return np.dtype(arg.dtype)


class CupyIO:
    """Host arrays to CuPy arrays and back, outputs poisoned."""

    name = "cupy"

    def upload(self, host: np.ndarray, arg: Arg) -> Any:
        import cupy as cp

        return cp.asarray(np.ascontiguousarray(host).view(arg.cupy_dtype))

    def empty(self, shape: tuple[int, ...], arg: Arg) -> Any:
        import cupy as cp

        return cp.empty(shape, dtype=arg.cupy_dtype)

    def poison(self, a: Any) -> None:
        a.view("uint8").fill(POISON)

    def download(self, a: Any, arg: Arg) -> np.ndarray:
        return a.get().view(host_dtype(arg))

    def call(self, kernel: Kernel, arrays: dict[str, Any], sizes: dict[str, int]) -> None:
        import cupy as cp

        kernel.run_cupy(arrays, sizes)
        cp.cuda.get_current_stream().synchronize()


class TorchIO:
    """Host arrays to CUDA tensors (through integer views of the same width) and back."""

    name = "torch"

    def upload(self, host: np.ndarray, arg: Arg) -> Any:
        import torch

        bits = torch.from_numpy(np.ascontiguousarray(host).view(f"int{8 * arg.itemsize}"))
        return bits.cuda().view(getattr(torch, arg.dtype))

    def empty(self, shape: tuple[int, ...], arg: Arg) -> Any:
        import torch

        return torch.empty(shape, dtype=getattr(torch, arg.dtype), device="cuda")

    def poison(self, t: Any) -> None:
        import torch

        t.view(torch.uint8).fill_(POISON)

    def download(self, t: Any, arg: Arg) -> np.ndarray:
        import torch

        return t.view(getattr(torch, f"int{8 * arg.itemsize}")).cpu().numpy().view(host_dtype(arg))

    def call(self, kernel: Kernel, arrays: dict[str, Any], sizes: dict[str, int]) -> None:
        import torch

        kernel.run_torch(arrays, sizes)
        torch.cuda.current_stream().synchronize()


def frameworks_here() -> tuple[str, ...]:
    """cupy, and torch where it is installed with CUDA."""
    if importlib.util.find_spec("torch") is None:
        return ("cupy",)
    import torch

    return ("cupy", "torch") if torch.cuda.is_available() else ("cupy",)


def check_kernel(kernel: Kernel, sizes: list[dict[str, int]] | None = None, seed: int = 0, runs: int = 2,
          frameworks: tuple[str, ...] | None = None, quiet: bool = False) -> float:
    """Run the kernel `runs` times at each size (default: the task's test sizes) through each
    framework (default: cupy, and torch where it has CUDA) on the same inputs and outputs, and
    compare every run's outputs with the reference. Returns the worst error over the tolerance
    (1 is the tolerance); raises AssertionError at the first run past it."""
    ios: dict[str, CupyIO | TorchIO] = {"cupy": CupyIO(), "torch": TorchIO()}
    worst = 0.0
    for size in sizes or [dict(s) for s in kernel.spec.test_sizes]:
        ref = reference_module(kernel)
        host = ref.make_inputs(dict(size), np.random.default_rng(seed))
        expected = ref.reference({k: v.copy() for k, v in host.items()}, dict(size))
        for name in frameworks or frameworks_here():
            io = ios[name]
            arrays = {a.name: io.upload(host[a.name], a) for a in kernel.inputs}
            arrays |= {a.name: io.empty(kernel.shape(a, size), a) for a in kernel.outputs}
            errors = []
            for run in range(1, runs + 1):
                for a in kernel.outputs:
                    io.poison(arrays[a.name])
                io.call(kernel, arrays, dict(size))
                error = max(error_ratio(io.download(arrays[a.name], a), expected[a.name], kernel.spec.tolerance)
                            for a in kernel.outputs)
                if error > 1:
                    raise AssertionError(f"{kernel.spec.task} through {name} at {label(size)}, call {run} of {runs}: "
                                         f"worst error {error:.3g} x the tolerance")
                errors.append(error)
            worst = max(worst, *errors)
            if not quiet:
                print(f"{kernel.spec.task} through {name} at {label(size)}: {runs} calls, worst error "
                      f"{max(errors):.3g} of the tolerance")
    return worst
