"""Run a KernelBench problem file at chosen sizes: its inputs and weights, its forward in float64,
and PyTorch's own module on the task's arrays (the comparators' side).

This file is copied verbatim into every imported task's reference.py, which also holds the problem
file's text (so that a task is one module that needs nothing from fsr and no file beside it: a
campaign ships that text to its workers), and the importer uses it for its own probing, so both
run the module alike. It needs only the standard library, NumPy and torch (and takes fsr's torch
lock where fsr is importable).

A problem file defines `Model`, `get_inputs()`, `get_init_inputs()` and module-level integer
sizes. `load(source, sizes)` executes the file's text with those sizes' assignments (`n = ...`,
`a = b = ...`, `a, b = 1, 2`, and `a_0`, `a_1` as the elements of `a = [1, 2]`) replaced by the given values, so that everything computed from
them (tuples of shapes, the model's constructor arguments) follows.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

import numpy as np

from fsr import pyast

FILENAME = "problem.py"  # what tracebacks from the problem file name
_TREES: dict[str, ast.Module] = {}  # by source text


try:
    from fsr.torch_lock import torch_lock
except ImportError:  # a task's reference.py run where fsr is not installed
    def torch_lock() -> threading.RLock:  # type: ignore[misc]  # fsr's CountedRLock where fsr is installed
        """The process's one lock around torch work that reads or sets the default dtype (see
        fsr/torch_lock.py). Without fsr, every task's copy of this file must still find the same
        lock, so it lives on the torch module."""
        import torch

        return torch.__dict__.setdefault("_fsr_default_dtype_lock", threading.RLock())


def load(source: str, sizes: dict[str, int]) -> dict[str, Any]:
    """The namespace of the problem file whose text is `source`, with each top-level `name = ...`
    of a size set to its value."""
    if source not in _TREES:
        _TREES[source] = pyast.parse(source, filename=FILENAME)
    body: list[ast.stmt] = []
    for stmt in _TREES[source].body:
        pairs = _bindings(stmt)
        if any(n in sizes for n, _ in pairs):
            body += [ast.Assign(targets=[ast.Name(n, ast.Store())], value=ast.Constant(sizes[n]) if n in sizes else v)
                     for n, v in pairs]
        else:
            body.append(_elements(stmt, sizes))
    module = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
    namespace: dict[str, Any] = {"__name__": "kernelbench_problem", "__file__": FILENAME}
    exec(compile(module, FILENAME, "exec"), namespace)  # the problem file is trusted user input
    return namespace


def _elements(stmt: ast.stmt, sizes: dict[str, int]) -> ast.stmt:
    """`stmt`, or where it is `a = [...]`, the list with each element `a_i` of `sizes` set."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.List)):
        return stmt
    name = stmt.targets[0].id
    elements = [ast.Constant(sizes[f"{name}_{i}"]) if f"{name}_{i}" in sizes else v for i, v in enumerate(stmt.value.elts)]
    return ast.Assign(targets=stmt.targets, value=ast.List(elts=elements, ctx=ast.Load()))


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

    with torch_lock(), torch.random.fork_rng(devices=[]):
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


def _model(namespace: dict[str, Any], layout: dict[str, Any], tensor: Any, device: str) -> Any:
    """The file's Model on `device` in the default dtype, every weight and buffer the task holds
    assigned from `tensor(name)` (built on the meta device where it can be: no initialisation)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        try:
            with torch.device("meta"):
                model = namespace["Model"](*namespace["get_init_inputs"]())
        except Exception:
            model = namespace["Model"](*namespace["get_init_inputs"]())
    model = model.to(device) if not any(t.is_meta for t in state(model).values()) else model
    for name, path in layout["state"]:
        assign(model, path, tensor(name))
    return model


def forward64(namespace: dict[str, Any], layout: dict[str, Any], arrays: dict[str, np.ndarray],
              device: str = "cpu") -> list[Any]:
    """The module's forward in float64 on `device`, its inputs and weights taken from `arrays`."""
    import torch

    def tensor(name: str) -> Any:  # a copy: a training-mode forward counts its batches in place
        t = torch.from_numpy(np.array(arrays[name], order="C")).to(device)
        return t.double() if t.is_floating_point() else t.bool() if name in layout.get("bools", ()) else t

    with torch_lock():
        before = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            model = _model(namespace, layout, tensor, device)
            with torch.no_grad(), torch.device(device):
                return outputs(model(*call_args(layout, tensor)))
        finally:
            torch.set_default_dtype(before)


_MODULE: list[tuple[Any, Any]] = []  # the comparators' model: [(key, model)], the last one built


def module32(source: str, layout: dict[str, Any], arrays: dict[str, Any], sizes: dict[str, int]) -> tuple[Any, list[Any]]:
    """PyTorch's own module (the file's dtypes: float32) with the task's weights, on the arrays'
    device (CUDA for CuPy arrays, the CPU for NumPy ones), and forward's arguments taken from
    `arrays`. The model is built once per sizes and device, from the first arrays it is given,
    and reused with later calls' activations: comparators time forward, never construction.
    Its parameters are zero-copy views of those first arrays (which it keeps alive); buffers and
    tensor attributes are copies, since a forward in training mode updates some in place
    (BatchNorm's running statistics) and a comparator must never write a task's inputs."""
    device = "cuda" if any(hasattr(a, "__cuda_array_interface__") for a in arrays.values()) else "cpu"
    key = (source, tuple(sorted(sizes.items())), device)
    if not _MODULE or _MODULE[0][0] != key:
        _MODULE[:] = [(key, _build32(source, layout, arrays, sizes, device))]
    return _MODULE[0][1], call_args(layout, lambda name: _view(layout, arrays, name))


def _build32(source: str, layout: dict[str, Any], arrays: dict[str, Any], sizes: dict[str, int], device: str) -> Any:
    namespace = load(source, sizes)
    with torch_lock():
        model = _model(namespace, layout, lambda name: _view(layout, arrays, name), device)
    parameters = {p for p, _ in model.named_parameters()}
    for name, path in layout["state"]:
        if path not in parameters:
            assign(model, path, _view(layout, arrays, name).clone())
    return model


def _view(layout: dict[str, Any], arrays: dict[str, Any], name: str) -> Any:
    """`arrays[name]` as a tensor without a copy (a bool mask, held as uint8, is one)."""
    import torch

    a = arrays[name]
    t = torch.as_tensor(a, device="cuda") if hasattr(a, "__cuda_array_interface__") else torch.as_tensor(a)
    return t.bool() if name in layout.get("bools", ()) else t


def draw(source: str, layout: dict[str, Any], sizes: dict[str, int], rng: Any) -> dict[str, np.ndarray]:
    """Inputs and weights as the file makes them, seeded from `rng`, by task argument name."""
    model, inputs = build(load(source, sizes), int(rng.integers(2**31 - 2)))
    weights = state(model)
    arrays = {name: t for name, t in zip(layout["inputs"], inputs, strict=True) if name not in layout["constants"]}
    arrays.update({name: weights[p] for name, p in layout["state"]})
    return {name: _array(t) for name, t in arrays.items()}


def _array(t: Any) -> np.ndarray:
    """A tensor as a contiguous array: 0-d as shape (1,), bool as uint8."""
    a = np.ascontiguousarray(t.detach().cpu().numpy()).reshape(t.shape or (1,))
    return a.astype(np.uint8) if a.dtype == np.bool_ else a


GPU_ELEMENTS = 2**22  # inputs past this many elements: the float64 reference runs on CUDA if torch has it


def reference_device(arrays: dict[str, np.ndarray]) -> str:
    """Where the float64 reference runs: CUDA when the inputs are large and torch sees a GPU (a
    float64 conv at KernelBench's sizes takes minutes to hours on a CPU), else the CPU. The
    device is the only difference: forward64 runs the same code on either."""
    import torch

    large = sum(a.size for a in arrays.values()) > GPU_ELEMENTS
    return "cuda" if large and torch.cuda.is_available() else "cpu"


def reference64(source: str, layout: dict[str, Any], arrays: dict[str, np.ndarray],
                sizes: dict[str, int]) -> dict[str, np.ndarray]:
    """The outputs in float64 (NumPy, on the host), by task argument name."""
    results = forward64(load(source, sizes), layout, arrays, reference_device(arrays))
    return {name: _array(t) for name, t in zip(layout["outputs"], results, strict=True)}
