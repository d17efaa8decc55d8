"""An exported kernel's calls: sizes read from the arguments' shapes (or given), every argument
checked, outputs and scratch allocated, then one launch sequence on one stream, from CuPy arrays
(`run_cupy`) or PyTorch tensors on torch's current stream (`run_torch`).

Copied into every exported module after fsr/export/runtime.py (the export drops the line that
imports it from fsr).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from fsr.export.runtime import POISON, Arg, Launch, Program, Spec, compile_cubin, label  # fsr-only


class Kernel:
    """One exported kernel: its launch plan at given sizes, its compiled program per device, and
    its calls. Thread-safe: the program is built once per device, under a lock."""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.inputs = tuple(a for a in spec.args if a.intent == "in")
        self.outputs = tuple(a for a in spec.args if a.intent == "out")
        self.programs: dict[int, Program] = {}
        self.cubins: dict[str, tuple[bytes, dict[str, str]]] = {}
        self.lock = threading.Lock()
        self.reference: Any = None  # the task's reference module, loaded by check (fsr.export.checks)

    def plan(self, sizes: dict[str, int]) -> list[tuple[str, tuple[int, ...], tuple[int, ...], int]]:
        """(kernel, grid, block, dynamic shared memory bytes) of each launch, in order, at these
        sizes; ValueError where the header's expressions give no valid launch."""
        names = dict(sizes) | dict(self.spec.defines)
        out = []
        for launch in self.running(sizes):
            grid = tuple(e.whole(names) for e in launch.grid)
            block = tuple(e.whole(names) for e in launch.block)
            smem = launch.smem.whole(names)
            if any(not 1 <= d < 2**31 for d in grid + block) or not 0 <= smem < 2**31:  # the driver's ints
                raise ValueError(f"{launch.kernel}: grid {grid} block {block} smem {smem} at {label(sizes)} "
                                 "is not a valid launch")
            out.append((launch.kernel, grid, block, smem))
        return out

    def running(self, sizes: dict[str, int]) -> list[Launch]:
        """The launches whose `when` holds at these sizes, in order; ValueError for one that passes
        what a module cannot make (a tensor map: fsr encodes those on the host with the driver)."""
        names = dict(sizes) | dict(self.spec.defines)
        known = {a.name for a in self.spec.args} | {s.name for s in self.spec.scratch} | set(self.spec.sizes) \
            | {c for c, _ in self.spec.constants}
        out = [launch for launch in self.spec.launches if launch.when is None or launch.when.holds(names)]
        for launch in out:
            if unknown := [a for a in launch.args if a not in known]:
                raise ValueError(f"{launch.kernel} at {label(sizes)} takes {', '.join(unknown)}, a tensor map, "
                                 "which an exported module does not make")
        return out

    def shape(self, arg: Arg, sizes: dict[str, int]) -> tuple[int, ...]:
        return tuple(d.whole(sizes) for d in arg.shape)

    def sizes(self, shapes: dict[str, tuple[int, ...]], given: dict[str, Any]) -> dict[str, int]:
        """Each size: given, or read from the first argument passed whose shape gives it in a
        dimension (less that dimension's offset); ValueError for one neither gives."""
        out = {}
        for name in self.spec.sizes:
            value = given.get(name)
            for arg, dim, offset in dict(self.spec.inferred).get(name, ()) if value is None else ():
                if arg in shapes and dim < len(shapes[arg]):
                    value = shapes[arg][dim] - offset
                    break
            if value is None:
                raise ValueError(f"size {name} is read from no argument's shape here: pass {name}=")
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value < 2**31:
                raise ValueError(f"size {name} must be an integer from 1 to 2**31 - 1, not {value!r}")
            out[name] = int(value)
        return out

    def check_arg(self, arg: Arg, shape: tuple[int, ...], sizes: dict[str, int], dtype_ok: bool, dtype: str,
                  contiguous: bool) -> None:
        """One argument's shape, dtype and layout as the kernel needs them; ValueError or TypeError."""
        want = self.shape(arg, sizes)
        if tuple(shape) != want:
            raise ValueError(f"{arg.name}: shape {tuple(shape)}, expected {want} at {label(sizes)}")
        if not dtype_ok:
            raise TypeError(f"{arg.name}: dtype {dtype}, expected {arg.dtype}")
        if not contiguous:
            raise ValueError(f"{arg.name}: not contiguous (row-major); the kernel indexes it as such")

    def program(self, device: int) -> Program:
        """The kernel compiled for `device`'s arch and loaded there (once per device)."""
        import cupy as cp

        with self.lock:
            if device not in self.programs:
                with cp.cuda.Device(device):
                    arch = f"sm_{cp.cuda.Device(device).compute_capability}"
                    if arch not in self.cubins:
                        self.cubins[arch] = compile_cubin(self.spec, arch)
                    self.programs[device] = Program(*self.cubins[arch])
            return self.programs[device]

    def enqueue(self, device: int, pointers: dict[str, int], sizes: dict[str, int], stream: Any) -> None:
        """One launch sequence on `stream` (a CuPy stream of `device`, current): scratch
        zeroed or poisoned as declared, module-scope variables restored, then every launch."""
        import cupy as cp

        program, plan, nbytes = self.program(device), self.plan(sizes), self.scratch_bytes(sizes)
        for s in self.spec.scratch:
            cp.cuda.runtime.memsetAsync(pointers[s.name], 0 if s.zero else POISON, nbytes[s.name], stream.ptr)
        program.reset(stream.ptr)
        constants = dict(self.spec.constants)
        for launch, (kernel, grid, block, smem) in zip(self.running(sizes), plan, strict=True):
            args = tuple(np.uint64(pointers[a]) if a in pointers else np.int32(sizes[a]) if a in sizes
                         else np.float32(constants[a]) for a in launch.args)
            program.allow_smem(kernel, smem)
            program.functions[kernel](grid, block, args, shared_mem=smem, stream=stream)

    def scratch_bytes(self, sizes: dict[str, int]) -> dict[str, int]:
        names = sizes | dict(self.spec.defines)
        return {s.name: max(s.count.whole(names), 1) * s.itemsize for s in self.spec.scratch}

    def result(self, outputs: dict[str, Any]) -> Any:
        """The output, or the outputs in the task's order."""
        values = tuple(outputs[a.name] for a in self.outputs)
        return values[0] if len(values) == 1 else values

    def run_cupy(self, arrays: dict[str, Any], given: dict[str, Any], stream: Any = None) -> Any:
        """One call on CuPy arrays (outputs allocated where None), on `stream` or the current one."""
        import cupy as cp

        held = _given(arrays, self.inputs, lambda a: isinstance(a, cp.ndarray), "a cupy array")
        device = _one_device({a.device.id for a in held.values()}, cp.cuda.Device().id)
        with cp.cuda.Device(device):
            sizes = self.sizes({n: tuple(a.shape) for n, a in held.items()}, given)
            stream = cp.cuda.get_current_stream() if stream is None else stream
            with stream:
                for arg in self.outputs:
                    if arg.name not in held:
                        held[arg.name] = cp.empty(self.shape(arg, sizes), dtype=arg.cupy_dtype)
                for arg in self.inputs + self.outputs:
                    a = held[arg.name]
                    ok = a.dtype.name == arg.cupy_dtype or (arg.dtype != arg.cupy_dtype and a.dtype.kind in "iu"
                                                            and a.dtype.itemsize == arg.itemsize)
                    self.check_arg(arg, a.shape, sizes, ok, a.dtype.name, a.flags.c_contiguous)
                scratch = {n: cp.empty(b, dtype=cp.uint8) for n, b in self.scratch_bytes(sizes).items()}
                pointers = {n: a.data.ptr for n, a in (held | scratch).items()}
                self.enqueue(device, pointers, sizes, stream)
        return self.result(held)

    def run_torch(self, tensors: dict[str, Any], given: dict[str, Any]) -> Any:
        """One call on CUDA tensors (outputs allocated where None), on torch's current stream of
        their device."""
        import cupy as cp
        import torch

        held = _given(tensors, self.inputs, lambda t: isinstance(t, torch.Tensor) and t.is_cuda, "a CUDA tensor")
        device = _one_device({t.device.index for t in held.values()}, torch.cuda.current_device())
        sizes = self.sizes({n: tuple(t.shape) for n, t in held.items()}, given)
        with torch.cuda.device(device):
            for arg in self.outputs:
                if arg.name not in held:
                    held[arg.name] = torch.empty(self.shape(arg, sizes), dtype=getattr(torch, arg.dtype), device=device)
            for arg in self.inputs + self.outputs:
                t = held[arg.name]
                self.check_arg(arg, tuple(t.shape), sizes, t.dtype == getattr(torch, arg.dtype), str(t.dtype),
                               t.is_contiguous())
            scratch = {n: torch.empty(b, dtype=torch.uint8, device=device) for n, b in self.scratch_bytes(sizes).items()}
            pointers = {n: t.data_ptr() for n, t in (held | scratch).items()}
            with cp.cuda.Device(device):
                self.enqueue(device, pointers, sizes, _cupy_stream(torch.cuda.current_stream(device), device))
        return self.result(held)


def _given(arrays: dict[str, Any], inputs: tuple[Arg, ...], fits: Any, kind: str) -> dict[str, Any]:
    """The arrays passed (None: not passed), each checked to be of the framework's kind; every
    input must be there."""
    for arg in inputs:
        if arrays.get(arg.name) is None:
            raise TypeError(f"{arg.name} is required")
    held = {n: a for n, a in arrays.items() if a is not None}
    for name, a in held.items():
        if not fits(a):
            raise TypeError(f"{name}: expected {kind}, not {type(a).__name__}")
    return held


def _one_device(devices: set[int], current: int) -> int:
    if len(devices) > 1:
        raise ValueError(f"the arguments are on devices {sorted(devices)}: all must be on one")
    return next(iter(devices), current)


def _cupy_stream(stream: Any, device: int) -> Any:
    """A PyTorch stream as CuPy's: through the CUDA stream protocol where CuPy has it (14 on)."""
    import cupy as cp

    if hasattr(cp.cuda.Stream, "from_external") and hasattr(stream, "__cuda_stream__"):
        return cp.cuda.Stream.from_external(stream)
    return cp.cuda.ExternalStream(stream.cuda_stream, device)
