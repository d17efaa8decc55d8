"""What an exported kernel module runs: NVRTC compiles the kernel as fsr compiled it, the module's
`__device__` variables are restored and its scratch filled before every call as fsr's judge does
before every launch sequence, the header's launches run in order on one stream, from CuPy arrays
or PyTorch tensors; `check` compares with the task's reference.

This file is copied into every module `fsr export` writes, after fsr/evaluate/device_globals.py,
whose `read` and `restore_spans` it uses: the export drops the one line below that imports them, so an
exported module imports nothing of fsr. numpy is needed always, cupy when a kernel runs, torch
only by the PyTorch entry point, and what the task's reference imports only by `check`.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsr.evaluate.device_globals import read, restore_spans  # fsr-only: defined above this code in an export

POISON = 0xFF  # NaN in every float dtype, -1 in every integer one: a scratch buffer not zeroed
DEFAULT_SMEM_BYTES = 48 * 1024  # dynamic shared memory past this (with the static part) needs an opt-in


def _cdiv(a: float, b: float) -> float:
    return -(-a // b)


def _pow(a: float, b: float) -> float:
    if abs(b) > 64:  # as fsr.expr: the exponent is bounded
        raise ValueError("exponent too large")
    value = a**b
    if isinstance(value, complex):  # as fsr.expr: a negative number to a fractional power is refused
        raise ValueError("not a real number")
    return value


@dataclass(frozen=True)
class Expr:
    """An expression of the kernel's header (`text`) and its Python translation (`value`), over
    the sizes and the kernel's tuned values (fsr.expr.to_python wrote it, from the parsed text)."""

    text: str
    value: Callable[[dict[str, int]], float]

    def whole(self, names: dict[str, int]) -> int:
        """Its value, which must be a whole number; ValueError naming the expression."""
        try:
            value = self.value(names)
            if value != int(value):
                raise ValueError(f"not a whole number ({value})")
            return int(value)
        except (ArithmeticError, ValueError, TypeError, KeyError) as e:
            raise ValueError(f"expression {self.text!r} at {label(names)}: {e}") from None

    def holds(self, names: dict[str, int]) -> bool:
        """Its truth (a launch's `when`); ValueError naming the expression."""
        try:
            return bool(self.value(names))
        except (ArithmeticError, ValueError, TypeError, KeyError) as e:
            raise ValueError(f"expression {self.text!r} at {label(names)}: {e}") from None


@dataclass(frozen=True)
class Arg:
    """A task buffer: its dtype, the dtype CuPy holds it as (the bits of bfloat16 and fp8 as
    unsigned integers of their width), bytes an element, shape, intent ("in" or "out")."""

    name: str
    dtype: str
    cupy_dtype: str
    itemsize: int
    shape: tuple[Expr, ...]
    intent: str


@dataclass(frozen=True)
class Scratch:
    name: str
    itemsize: int
    count: Expr
    zero: bool  # zeroed before every call; otherwise filled with POISON


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[Expr, ...]
    block: tuple[Expr, ...]
    smem: Expr
    args: tuple[str, ...]  # buffers, scratch, sizes (int32), constants (float32), in parameter order
    when: Expr | None = None  # the sizes at which it runs (None: all)


@dataclass(frozen=True)
class Spec:
    """Everything the export knew: the text NVRTC compiles (tuned values as #defines first),
    its options, the task's signature, sizes, tolerance and reference, the header's launches."""

    task: str
    source: str
    kernels: tuple[str, ...]
    options: tuple[str, ...]
    variant_only: str  # ptxas's words for an instruction only the arch-specific variant (sm_90a) has
    sizes: tuple[str, ...]
    inferred: tuple[tuple[str, tuple[tuple[str, int, int], ...]], ...]  # size -> (arg, dimension, offset)
    args: tuple[Arg, ...]
    constants: tuple[tuple[str, float], ...]
    defines: tuple[tuple[str, int], ...]
    scratch: tuple[Scratch, ...]
    launches: tuple[Launch, ...]
    test_sizes: tuple[tuple[tuple[str, int], ...], ...]
    tolerance: tuple[float, float, float]  # atol, rtol, floor (x an output's mean |ref|)
    reference_source: str
    reference_path: str


def label(sizes: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sizes.items())


def include_dirs() -> list[str]:
    """CUDA header folders, found as fsr finds them (fsr.evaluate.compile.include_dirs)."""
    roots = [Path(os.environ["CUDA_PATH"]) / "include"] if os.environ.get("CUDA_PATH") else []
    spec = importlib.util.find_spec("nvidia")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        roots += [Path(loc) / "cu13" / "include", Path(loc) / "cuda_runtime" / "include"]
    roots.append(Path("/usr/local/cuda/include"))
    found = [str(d) for root in roots for d in (root, root / "cccl")
             if (d / "cuda_fp16.h").is_file() or (d / "cuda").is_dir()]
    return list(dict.fromkeys(found))


def variant_arch(arch: str) -> str:
    """sm_90 -> sm_90a from sm_90 on, as fsr.evaluate.compile.target_arch."""
    m = re.fullmatch(r"sm_(\d{2,3})", arch)
    return f"{arch}a" if m and int(m.group(1)) >= 90 else arch


class CompileError(RuntimeError):
    """NVRTC refused the kernel here (another NVRTC or CUDA headers than fsr's)."""


def compile_cubin(spec: Spec, arch: str) -> tuple[bytes, dict[str, str]]:
    """The cubin for a device of `arch` and each kernel's symbol in it; code that only the
    arch-specific variant assembles (wgmma) is compiled for that variant, as fsr does."""
    try:
        return _nvrtc(spec, arch)
    except CompileError as e:
        if variant_arch(arch) == arch or not re.search(spec.variant_only, str(e)):
            raise
    return _nvrtc(spec, variant_arch(arch))


def _nvrtc(spec: Spec, arch: str) -> tuple[bytes, dict[str, str]]:
    from cupy_backends.cuda.libs import nvrtc  # CuPy's binding, as fsr's: RawModule would add -ftz=true

    prog = nvrtc.createProgram(spec.source, "candidate.cu", [], [])
    try:
        for k in spec.kernels:
            nvrtc.addNameExpression(prog, k)
        options = [f"--gpu-architecture={arch}", *spec.options, *(f"--include-path={d}" for d in include_dirs())]
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError:
            raise CompileError(f"{spec.task}: NVRTC failed for {arch}:\n{nvrtc.getProgramLog(prog)}") from None
        return nvrtc.getCUBIN(prog), {k: nvrtc.getLoweredName(prog, k) for k in spec.kernels}
    finally:
        nvrtc.destroyProgram(prog)


class Program:
    """The kernel loaded on one device, with the restore of its module-scope variables."""

    def __init__(self, cubin: bytes, symbols: dict[str, str]):
        import cupy as cp

        self.module = cp.cuda.Module()
        self.module.load(cubin)
        self.functions = {k: self.module.get_function(s) for k, s in symbols.items()}
        self.images: list[Any] = []  # device copies of initial images, kept alive
        self.resets: list[tuple[int, int, int]] = []  # (address, bytes, source address or 0: zero)
        drv = cp.cuda.driver
        for section in read(cubin).sections:
            placed: dict[str, int] = {}
            for sym in section.symbols:
                try:
                    placed[sym.name] = int(drv.moduleGetGlobal(self.module.ptr, sym.name))
                except drv.CUDADriverError:  # not exported under that name: not restorable
                    continue
            found = restore_spans(section, placed)
            if found is None:
                raise RuntimeError(f"the kernel's {section.name} variables cannot be located, so they "
                                   "could not be restored before each call")
            if section.image is None:
                self.resets += [(span.address, span.size, 0) for span in found]
                continue
            # The bytes the loader wrote, copied before any launch (it fills in pointers the cubin
            # leaves 0), as the judge restores them.
            image = cp.empty(section.size, dtype=cp.uint8)
            for span in found:
                cp.cuda.runtime.memcpy(image.data.ptr + span.offset, span.address, span.size,
                                       cp.cuda.runtime.memcpyDeviceToDevice)
            self.images.append(image)
            self.resets += [(span.address, span.size, image.data.ptr + span.offset) for span in found]
        self.smem_allowed: dict[str, int] = {}

    def reset(self, stream_ptr: int) -> None:
        """Queue the restore of every module-scope variable: zeroed, or its initial image copied."""
        import cupy as cp

        rt = cp.cuda.runtime
        for ptr, size, source in self.resets:
            if source:
                rt.memcpyAsync(ptr, source, size, rt.memcpyDeviceToDevice, stream_ptr)
            else:
                rt.memsetAsync(ptr, 0, size, stream_ptr)

    def allow_smem(self, kernel: str, smem: int) -> None:
        """Opt in to `smem` bytes of dynamic shared memory where the default limit is too low."""
        import cupy as cp

        drv = cp.cuda.driver
        fn = self.functions[kernel]
        static = int(drv.funcGetAttribute(drv.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn.ptr))
        if smem + static > DEFAULT_SMEM_BYTES and self.smem_allowed.get(kernel, 0) < smem:
            drv.funcSetAttribute(fn.ptr, drv.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
            self.smem_allowed[kernel] = smem
