"""A candidate's loaded program and its launches: the module and its kernels, the restore of its
module-scope variables, launch planning and enqueueing, and what a CUDA error means (a refused
launch, or a context the kernel broke).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np

from fsr import candidate as cfmt
from fsr.evaluate import device_globals
from fsr.types import Candidate, Resources, Task


class LaunchRefused(Exception):
    """The driver refused a launch (bad configuration, too many resources): LAUNCH_ERROR."""


class ContextLost(Exception):
    """The kernel broke the CUDA context (illegal address, trap): CRASH, child must be replaced."""


class Program:
    """A loaded cubin, its kernels by declared name, and its module-scope variables, which
    `reset_globals` restores to their state at load (fsr.evaluate.device_globals): zeroed, or
    copied back from a copy taken right after the load."""

    def __init__(self, cubin: bytes, lowered: tuple[tuple[str, str], ...]):
        self.module = cp.cuda.Module()
        self.module.load(cubin)
        self.kernels = {name: self.module.get_function(symbol) for name, symbol in lowered}
        self.globals = device_globals.read(cubin)
        self._images: list[cp.ndarray] = []  # keeps the device copies of initial images alive
        self.unresettable: list[str] = []  # sections with a variable the driver could not place
        self._resets = [r for s in self.globals.sections for r in self._ranges(s)]
        self._clusters: dict[str, tuple[int, int, int] | None] = {}

    def _ranges(self, section: device_globals.Section) -> list[tuple[int, int, int]]:
        """(device address, bytes, source address or 0 for zero), one per variable of a section
        (device_globals.restore_spans); none, and the section named unresettable, when a variable
        has no address under its name."""
        placed: dict[str, int] = {}
        for sym in section.symbols:
            try:
                placed[sym.name] = int(cp.cuda.driver.moduleGetGlobal(self.module.ptr, sym.name))
            except cp.cuda.driver.CUDADriverError:  # not exported under that name: not restorable
                continue
        spans = device_globals.restore_spans(section, placed)
        if spans is None:
            self.unresettable.append(section.name)
            return []
        if section.image is None:
            return [(span.address, span.size, 0) for span in spans]
        if not spans:
            return []
        # The bytes the loader wrote, copied before any launch, not the cubin's: the loader fills
        # in pointers (a __device__ pointer to a string literal or to another variable is 0 in
        # the cubin, and restoring that made the kernel read address 0)
        image = cp.empty(section.size, dtype=cp.uint8)
        for span in spans:
            cp.cuda.runtime.memcpyAsync(image.data.ptr + span.offset, span.address, span.size,
                                        cp.cuda.runtime.memcpyDeviceToDevice, 0)
        cp.cuda.Stream.null.synchronize()  # fsr's streams do not wait for the legacy default one
        self._images.append(image)
        return [(span.address, span.size, image.data.ptr + span.offset) for span in spans]

    def reset_globals(self, stream: cp.cuda.Stream) -> None:
        """Queue the restore of every module-scope variable on `stream`: zero-initialised ones
        zeroed, initialised ones given their initial image back (before every launch sequence)."""
        for ptr, size, source in self._resets:
            if source:
                cp.cuda.runtime.memcpyAsync(ptr, source, size, cp.cuda.runtime.memcpyDeviceToDevice, stream.ptr)
            else:
                cp.cuda.runtime.memsetAsync(ptr, 0, size, stream.ptr)

    def resources(self, reported: Resources | None = None) -> Resources:
        """Registers, static shared memory and local memory as the driver loaded them (max over
        kernels); spill bytes from the compiler's report when there is one."""
        drv = cp.cuda.driver

        def most(attribute: int) -> int:
            return max(int(drv.funcGetAttribute(attribute, f.ptr)) for f in self.kernels.values())

        return Resources(registers=most(drv.CU_FUNC_ATTRIBUTE_NUM_REGS),
                         spill_bytes=reported.spill_bytes if reported else 0,
                         smem_static_bytes=most(drv.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
                         stack_bytes=most(drv.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES))

    def static_smem(self, name: str) -> int:
        """The named kernel's static shared memory as loaded: it counts against the same 48 KiB
        default limit as the dynamic part."""
        drv = cp.cuda.driver
        return int(drv.funcGetAttribute(drv.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, self.kernels[name].ptr))


    def cluster(self, name: str) -> tuple[int, int, int] | None:
        """The cluster the named kernel was compiled with (`__cluster_dims__`), or None."""
        if name not in self._clusters:
            drv = cp.cuda.driver
            dims = tuple(int(drv.funcGetAttribute(a, self.kernels[name].ptr)) for a in REQUIRED_CLUSTER)
            self._clusters[name] = dims if all(d > 0 for d in dims) else None  # type: ignore[assignment]
        return self._clusters[name]


# CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, _HEIGHT, _DEPTH (cuda.h; CuPy names none of them)
REQUIRED_CLUSTER = (11, 12, 13)


@dataclass(frozen=True)
class Launch:
    """One launch with its dimensions and arguments resolved (expressions evaluated once); `ex`,
    where the launch takes tensor maps or runs in clusters, is the driver's extended launch
    that makes it (fsr.evaluate.gpu.launch_ex)."""

    name: str
    kernel: cp.RawKernel
    grid: tuple[int, ...]
    block: tuple[int, ...]
    smem: int
    args: tuple
    ex: Any = None


def plan(program: Program, cand: Candidate, task: Task, sizes: dict[str, int],
         buffers: dict[str, cp.ndarray]) -> list[Launch]:
    """Every launch that runs at these sizes, on these buffers, its tensor maps encoded over
    them; raises LaunchRefused."""
    try:
        running = cfmt.launches_at(cand, sizes)
        maps = cfmt.resolve_maps(cand, task, sizes, [spec for spec, _ in running])
        names = cfmt.names_at(cand, sizes)
        clusters = [cfmt.cluster_of(spec, {}, names) for spec, _ in running]  # the header's
    except cfmt.HeaderError as e:  # checked at the task's sizes already: another size (fsr launch)
        raise LaunchRefused(str(e)) from None
    constants = dict(task.constants)
    out = []
    for (launch, (grid, block, smem)), cluster in zip(running, clusters, strict=True):
        kernel = program.kernels[launch.kernel]
        args = tuple(buffers[a] if a in buffers else np.int32(sizes[a]) if a in sizes
                     else None if a in maps else np.float32(constants[a]) for a in launch.args)
        where = f"{launch.kernel} grid={grid} block={block} smem={smem}"
        try:
            if smem and smem + program.static_smem(launch.kernel) > 48 * 1024:  # past the default limit: opt in
                cp.cuda.driver.funcSetAttribute(
                    kernel.ptr, cp.cuda.driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
            compiled = program.cluster(launch.kernel)
        except cp.cuda.driver.CUDADriverError as e:
            raise LaunchRefused(f"{where}: {e}") from None
        if (cluster or compiled) and (reason := cfmt.cluster_misfit(grid, cluster or compiled)):  # type: ignore[arg-type]
            raise LaunchRefused(f"{where}: {reason}")
        ex = None
        if cluster or compiled or any(a in maps for a in launch.args):
            ex = _extended(kernel.ptr, grid, block, smem, cluster, launch.args, args, maps, buffers, where)
        out.append(Launch(launch.kernel, kernel, grid, block, smem, args, ex))
    return out


def _extended(function: int, grid: tuple[int, ...], block: tuple[int, ...], smem: int,
              cluster: tuple[int, int, int] | None, names: tuple[str, ...], args: tuple, maps: dict[str, Any],
              buffers: dict[str, cp.ndarray], where: str) -> Any:
    """The extended launch of one planned launch, each map encoded over its buffer here."""
    import ctypes

    from fsr.evaluate.gpu import launch_ex  # cuda.bindings: only where a launch needs it

    values: list[Any] = []
    try:
        for name, arg in zip(names, args, strict=True):
            if name in maps:
                values.append(launch_ex.encode(maps[name], int(buffers[maps[name].buffer].data.ptr)))
            elif isinstance(arg, cp.ndarray):
                values.append(ctypes.c_void_p(int(arg.data.ptr)))
            else:
                values.append(ctypes.c_int32(int(arg)) if isinstance(arg, np.int32) else ctypes.c_float(float(arg)))
        return launch_ex.ExLaunch(function, grid, block, smem, cluster, values)
    except launch_ex.DriverRefused as e:
        raise LaunchRefused(f"{where}: {e}") from None


def enqueue(launches: list[Launch], stream: cp.cuda.Stream) -> None:
    """Enqueue planned launches on `stream`, in order; raises LaunchRefused."""
    for launch in launches:
        if launch.ex is not None:
            _enqueue_ex(launch, stream)
            continue
        try:
            launch.kernel(launch.grid, launch.block, launch.args, shared_mem=launch.smem, stream=stream)
        except cp.cuda.driver.CUDADriverError as e:
            raise LaunchRefused(f"{launch.name} grid={launch.grid} block={launch.block} smem={launch.smem}: {e}") from None


def _enqueue_ex(launch: Launch, stream: cp.cuda.Stream) -> None:
    from fsr.evaluate.gpu import launch_ex

    try:
        launch.ex.enqueue(stream.ptr)
    except launch_ex.DriverRefused as e:
        raise LaunchRefused(f"{launch.name} grid={launch.grid} block={launch.block} smem={launch.smem}: {e}") from None


def launch_all(program: Program, cand: Candidate, task: Task, sizes: dict[str, int],
               buffers: dict[str, cp.ndarray], stream: cp.cuda.Stream) -> None:
    """Enqueue every declared launch on `stream`; raises LaunchRefused."""
    enqueue(plan(program, cand, task, sizes, buffers), stream)


def synchronize(stream: cp.cuda.Stream) -> None:
    """Wait for the stream; any error now means the context is gone."""
    try:
        stream.synchronize()
    except (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError) as e:
        raise ContextLost(crash_line(e)) from None


# CUDA errors that leave the context unusable (same numbers in the driver and runtime APIs), and
# what each means for a kernel's author.
STICKY_ERRORS = {
    700: "the kernel read or wrote memory outside its buffers",
    702: "the kernel ran past the display watchdog",
    710: "a device-side assertion or trap stopped the kernel",
    714: "the kernel overflowed or corrupted its stack",
    715: "the kernel executed an illegal instruction",
    716: "a load or store was not aligned to its size (e.g. float4 at an address not a multiple of 16)",
    717: "an instruction used an address outside its memory space",
    718: "the kernel jumped to an invalid program counter",
    719: "the kernel faulted while running",
}


def crash_line(error: BaseException) -> str:
    """One line for a CUDA error that broke the context: the error's name and what it means."""
    status = getattr(error, "status", None)
    name = str(error).split(":", 1)[0].strip() or type(error).__name__
    meaning = STICKY_ERRORS.get(status, " ".join(str(error).split(":", 1)[-1].split()))  # type: ignore[arg-type]
    return f"the kernel broke the CUDA context: {name} ({meaning}); the GPU child was replaced"


def is_context_error(error: BaseException) -> bool:
    """A CUDA error of the kind a faulting kernel leaves behind (any call may report it)."""
    return (isinstance(error, (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError))
            and getattr(error, "status", None) in STICKY_ERRORS)


def context_error() -> BaseException | None:
    """The error a broken context answers any call with (a kernel's fault found late, by a call
    of fsr's own), or None while the context is usable. Asks without waiting on any stream."""
    try:
        cp.cuda.runtime.memGetInfo()
    except (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError) as e:
        return e if is_context_error(e) else None
    return None


def failure_reply(error: BaseException, probe: Callable[[], BaseException | None] = context_error) -> tuple[str, str]:
    """What the GPU child tells its parent when a request raised `error` (the child is replaced
    either way): ("crash", line) when the candidate caused it: a context its kernel broke,
    whichever call found out (`error` itself, else `probe`), or device memory its buffers asked
    for and did not get; else ("fault", line): fsr's own code failed, never a verdict on the
    candidate (the parent retries it on a fresh child, then reports fsr's error)."""
    if is_context_error(error):
        return "crash", crash_line(error)
    if isinstance(error, cp.cuda.memory.OutOfMemoryError):
        return "crash", f"out of GPU memory for the candidate's buffers ({_one_line(error)}); the GPU child was replaced"
    broken = probe()
    if broken is not None:
        return "crash", crash_line(broken)
    return "fault", (f"evaluator error ({type(error).__name__}: {_one_line(error)}); the GPU child was replaced "
                     "(traceback in the worker's log)")


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]
