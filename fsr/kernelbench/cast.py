"""A KernelBench problem run in float16 or bfloat16, as KernelBench v0.2 runs one with
`precision=`: the module built in float32 as the file builds it, its floating parameters and
buffers cast to the dtype (`Module.to(dtype)`), and its floating inputs cast too. Integer and bool
tensors (class labels, masks) keep their dtype, and numbers from get_inputs stay numbers.

An imported task of such a dtype holds its floating arguments in it (bfloat16 as ml_dtypes'
NumPy type on the host, as a CuPy uint16 array of its bits on a GPU: fsr.dtypes.device_dtype);
its reference is the float64 forward of those rounded values, and its comparators run PyTorch's
module in the dtype on them.

Everything after the line `# copied from here` is appended, verbatim, to such a task's
reference.py after runtime.py, whose functions (draw, reference64, module32) it calls there; here
it imports them. It needs only NumPy, ml_dtypes and torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fsr.kernelbench.runtime import _MODULE, _model, assign, call_args, draw, load, reference64, torch_lock

COPY_FROM = "# copied from here"

# copied from here


def cast_draw(source: str, layout: dict[str, Any], sizes: dict[str, int], rng: Any) -> dict[str, np.ndarray]:
    """The file's inputs and weights (drawn in float32) with each floating one rounded to the
    layout's dtype."""
    import ml_dtypes

    kind = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[layout["dtype"]]
    return {k: a.astype(kind) if a.dtype.kind == "f" else a for k, a in draw(source, layout, sizes, rng).items()}


def _wide(a: np.ndarray) -> np.ndarray:
    """A bfloat16 or float16 host array as float32 (exactly: every such value is a float32)."""
    return a.astype(np.float32) if a.dtype.name in ("bfloat16", "float16") else a


def cast_reference(source: str, layout: dict[str, Any], arrays: dict[str, np.ndarray],
                   sizes: dict[str, int]) -> dict[str, np.ndarray]:
    """The float64 forward of the rounded inputs and weights."""
    return reference64(source, layout, {k: _wide(a) for k, a in arrays.items()}, sizes)


def as_torch(a: Any) -> Any:
    """A host or CuPy array as a torch tensor of its dtype, without a copy: a bfloat16 array (or
    the uint16 array of its bits that CuPy holds; fsr has no uint16 buffers) through int16, a
    dtype both know."""
    import torch

    cuda = hasattr(a, "__cuda_array_interface__")
    if a.dtype.name in ("bfloat16", "uint16"):
        bits = a.view(np.int16)
        return (torch.as_tensor(bits, device="cuda") if cuda else torch.from_numpy(bits)).view(torch.bfloat16)
    return torch.as_tensor(a, device="cuda") if cuda else torch.as_tensor(a)


def cast_module(source: str, layout: dict[str, Any], arrays: dict[str, Any], sizes: dict[str, int]) -> tuple[Any, list[Any]]:
    """PyTorch's module in the layout's dtype with the task's weights, and forward's arguments:
    as module32 (built once per sizes and device; parameters are views of the first arrays,
    buffers copies, since a training-mode forward updates some in place), on tensors of the dtype."""
    device = "cuda" if any(hasattr(a, "__cuda_array_interface__") for a in arrays.values()) else "cpu"
    key = (source, tuple(sorted(sizes.items())), device, layout["dtype"])

    def tensor(name: str) -> Any:
        t = as_torch(arrays[name])
        return t.bool() if name in layout.get("bools", ()) else t

    if not _MODULE or _MODULE[0][0] != key:
        with torch_lock():
            model = _model(load(source, sizes), layout, tensor, device)
        parameters = {p for p, _ in model.named_parameters()}
        for name, path in layout["state"]:
            if path not in parameters:
                assign(model, path, tensor(name).clone())
        _MODULE[:] = [(key, model)]
    return _MODULE[0][1], call_args(layout, tensor)
