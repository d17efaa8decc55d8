"""Run a KernelBench problem file at chosen sizes: its inputs and weights, and its forward in float64.

This file is copied verbatim into every imported task's reference.py (so that a task folder needs
nothing from fsr), and the importer uses it for its own probing, so both run the module alike.
It needs only the standard library, NumPy and torch.

A problem file defines `Model`, `get_inputs()`, `get_init_inputs()` and module-level integer
sizes. `load(path, sizes)` executes the file with those sizes' assignments (`n = ...`, `a = b = ...`,
`a, b = 1, 2`) replaced by the given
values, so that everything computed from them (tuples of shapes, the model's constructor
arguments) follows.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import numpy as np

_TREES: dict[str, ast.Module] = {}


def load(path: str | Path, sizes: dict[str, int]) -> dict[str, Any]:
    """The problem file's namespace, with each top-level `name = ...` of a size set to its value."""
    key = str(path)
    if key not in _TREES:
        _TREES[key] = ast.parse(Path(path).read_text(), filename=key)
    body: list[ast.stmt] = []
    for stmt in _TREES[key].body:
        pairs = _bindings(stmt)
        if any(n in sizes for n, _ in pairs):
            body += [ast.Assign(targets=[ast.Name(n, ast.Store())], value=ast.Constant(sizes[n]) if n in sizes else v)
                     for n, v in pairs]
        else:
            body.append(stmt)
    module = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
    namespace: dict[str, Any] = {"__name__": "kernelbench_problem", "__file__": key}
    exec(compile(module, key, "exec"), namespace)  # the problem file is trusted user input
    return namespace


def _bindings(stmt: ast.stmt) -> list[tuple[str, ast.expr]]:
    """(name, value) for each name that `a = b = value` or `a, b = 1, 2` binds; [] otherwise."""
    if not isinstance(stmt, ast.Assign):
        return []
    if all(isinstance(t, ast.Name) for t in stmt.targets):
        return [(t.id, stmt.value) for t in stmt.targets if isinstance(t, ast.Name)]
    target = stmt.targets[0]
    if (len(stmt.targets) == 1 and isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple)
            and len(target.elts) == len(stmt.value.elts) and all(isinstance(t, ast.Name) for t in target.elts)):
        return [(t.id, v) for t, v in zip(target.elts, stmt.value.elts, strict=True) if isinstance(t, ast.Name)]
    return []


def build(namespace: dict[str, Any], seed: int) -> tuple[Any, list[Any]]:
    """The model (constructed as the file does, seeded) and the inputs from get_inputs()."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = namespace["Model"](*namespace["get_init_inputs"]())
        torch.manual_seed(seed + 1)
        inputs = list(namespace["get_inputs"]())
    return model, inputs


def state(model: Any) -> dict[str, Any]:
    """Parameters, buffers and plain tensor attributes of every submodule, by module path."""
    import torch

    found: dict[str, Any] = {}
    for prefix, module in model.named_modules():
        dot = prefix + "." if prefix else ""
        tensors = list(module._parameters.items()) + list(module._buffers.items())
        tensors += [(k, v) for k, v in vars(module).items() if isinstance(v, torch.Tensor)]
        for name, tensor in tensors:
            if tensor is not None and all(tensor is not t for t in found.values()):
                found[dot + name] = tensor
    return found


def assign(model: Any, path: str, tensor: Any) -> None:
    """Put `tensor` where `path` (a module path from `state`) points, keeping its kind and shape
    (a task holds a 0-d tensor as shape (1,))."""
    import torch

    *parents, leaf = path.split(".")
    module = model.get_submodule(".".join(parents))
    tensor = tensor.reshape(getattr(module, leaf).shape)
    if leaf in module._parameters:
        module._parameters[leaf] = torch.nn.Parameter(tensor, requires_grad=False)
    elif leaf in module._buffers:
        module._buffers[leaf] = tensor
    else:
        object.__setattr__(module, leaf, tensor)


def outputs(result: Any) -> list[Any]:
    """forward's result as a list of tensors; raises TypeError for anything else."""
    import torch

    items = list(result) if isinstance(result, tuple | list) else [result]
    for item in items:
        if not isinstance(item, torch.Tensor):
            raise TypeError(f"forward returns a {type(item).__name__}, not tensors")
    return [t.reshape(1) if t.dim() == 0 else t for t in items]


def call_args(layout: dict[str, Any], tensor: Any) -> list[Any]:
    """forward's arguments: `tensor(name)` for tensors, the value for a number get_inputs gives."""
    return [layout["constants"][n] if n in layout["constants"] else tensor(n) for n in layout["inputs"]]


def forward64(namespace: dict[str, Any], layout: dict[str, Any], arrays: dict[str, np.ndarray],
              device: str = "cpu") -> list[Any]:
    """The module's forward in float64 on `device`, its inputs and weights taken from `arrays`."""
    import torch

    def tensor(name: str) -> Any:
        t = torch.from_numpy(np.ascontiguousarray(arrays[name])).to(device)
        return t.double() if t.is_floating_point() else t.bool() if name in layout.get("bools", ()) else t

    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            try:
                with torch.device("meta"):  # no weight initialisation: every weight is assigned below
                    model = namespace["Model"](*namespace["get_init_inputs"]())
            except Exception:
                model = namespace["Model"](*namespace["get_init_inputs"]())
        model = model.to(device) if not any(t.is_meta for t in state(model).values()) else model
        for name, path in layout["state"]:
            assign(model, path, tensor(name))
        with torch.no_grad(), torch.device(device):
            return outputs(model(*call_args(layout, tensor)))
    finally:
        torch.set_default_dtype(before)


def draw(path: str | Path, layout: dict[str, Any], sizes: dict[str, int], rng: Any) -> dict[str, np.ndarray]:
    """Inputs and weights as the file makes them, seeded from `rng`, by task argument name."""
    model, inputs = build(load(path, sizes), int(rng.integers(2**31 - 2)))
    weights = state(model)
    arrays = {name: t for name, t in zip(layout["inputs"], inputs, strict=True) if name not in layout["constants"]}
    arrays.update({name: weights[p] for name, p in layout["state"]})
    return {name: _array(t) for name, t in arrays.items()}


def _array(t: Any) -> np.ndarray:
    """A tensor as a contiguous array: 0-d as shape (1,), bool as uint8."""
    a = np.ascontiguousarray(t.detach().cpu().numpy()).reshape(t.shape or (1,))
    return a.astype(np.uint8) if a.dtype == np.bool_ else a


def reference64(path: str | Path, layout: dict[str, Any], arrays: dict[str, np.ndarray],
                sizes: dict[str, int]) -> dict[str, np.ndarray]:
    """The outputs in float64, by task argument name; on the GPU when the inputs are large."""
    import torch

    large = sum(a.size for a in arrays.values()) > 2**24
    device = "cuda" if large and torch.cuda.is_available() else "cpu"
    results = forward64(load(path, sizes), layout, arrays, device)
    return {name: _array(t) for name, t in zip(layout["outputs"], results, strict=True)}
