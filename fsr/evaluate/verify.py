"""Device buffers with canaries, launching a candidate, and checking its outputs.

Runs in the evaluator's child process only (imports cupy). Every buffer a kernel sees sits
between two canary regions, so a write past either end is caught even where the memory pool
would have absorbed it silently; outputs and scratch are poisoned with NaN bytes before every
launch, so an element the kernel never writes cannot pass.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import cupy as cp
import numpy as np

from fsr import candidate as cfmt
from fsr import tasks
from fsr.evaluate import device_globals
from fsr.types import Candidate, Resources, SizeCheck, Task, size_label

PAD_BYTES = 64 * 1024  # canary region on each side; a multiple of 256 keeps buffers aligned
CANARY = 0x5A
POISON = 0xFF  # all-ones bytes: NaN for float32/float64, -1 for integers
MAX_SHOWN = 4
PARALLEL_ELEMENTS = 1 << 22  # compare on several threads above this many elements
COMPARE_THREADS = 8


class LaunchRefused(Exception):
    """The driver refused a launch (bad configuration, too many resources): LAUNCH_ERROR."""


class ContextLost(Exception):
    """The kernel broke the CUDA context (illegal address, trap): CRASH, child must be replaced."""


class Guarded:
    """A device array between two canary regions."""

    def __init__(self, shape: tuple[int, ...], dtype: str):
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * self.dtype.itemsize
        self.raw = cp.empty(self.nbytes + 2 * PAD_BYTES, dtype=cp.uint8)
        self.raw[:PAD_BYTES].fill(CANARY)
        self.raw[PAD_BYTES + self.nbytes:].fill(CANARY)
        self.array = self.raw[PAD_BYTES:PAD_BYTES + self.nbytes].view(self.dtype).reshape(shape)

    @classmethod
    def from_host(cls, host: np.ndarray) -> Guarded:
        g = cls(host.shape, host.dtype.name)
        g.array.set(np.ascontiguousarray(host))
        return g

    def fill(self, byte: int) -> None:
        self.raw[PAD_BYTES:PAD_BYTES + self.nbytes].fill(byte)

    def canaries_intact(self) -> bool:
        return bool((self.raw[:PAD_BYTES] == CANARY).all() & (self.raw[PAD_BYTES + self.nbytes:] == CANARY).all())


class Program:
    """A loaded cubin, its kernels by declared name, and its module-scope variables, which
    `reset_globals` restores to their state at load (fsr.evaluate.device_globals)."""

    def __init__(self, cubin: bytes, lowered: tuple[tuple[str, str], ...]):
        self.module = cp.cuda.Module()
        self.module.load(cubin)
        self.kernels = {name: self.module.get_function(symbol) for name, symbol in lowered}
        self.globals = device_globals.read(cubin)
        self._images: list[cp.ndarray] = []  # keeps the device copies of initial images alive
        self.unresettable: list[str] = []  # sections no variable of which the driver could place
        self._resets = [r for s in self.globals.sections for r in self._ranges(s)]

    def _ranges(self, section: device_globals.Section) -> list[tuple[int, int, int]]:
        """(device address, bytes, source address or 0 for zero) covering a section: the whole
        section from its first variable's address when every variable sits at base + offset (the
        loader keeps a section whole), else variable by variable."""
        addresses = []
        for sym in section.symbols:
            try:
                addresses.append((sym, int(cp.cuda.driver.moduleGetGlobal(self.module.ptr, sym.name))))
            except cp.cuda.driver.CUDADriverError:  # not exported under that name: another one places the section
                continue
        if not addresses:
            self.unresettable.append(section.name)
            return []
        base = addresses[0][1] - addresses[0][0].offset
        whole = all(ptr == base + sym.offset for sym, ptr in addresses)
        spans = [(base, 0, section.size)] if whole else [(ptr, sym.offset, sym.size) for sym, ptr in addresses]
        if section.image is None:
            return [(ptr, size, 0) for ptr, _, size in spans]
        image = cp.asarray(np.frombuffer(section.image, dtype=np.uint8))
        self._images.append(image)
        return [(ptr, size, image.data.ptr + offset) for ptr, offset, size in spans]

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


@dataclass
class Buffers:
    """Every named buffer of one launch sequence at one size."""

    inputs: dict[str, Guarded]
    outputs: dict[str, Guarded]
    scratch: dict[str, Guarded]

    def all(self) -> dict[str, Guarded]:
        return self.inputs | self.outputs | self.scratch

    def reset(self, cand: Candidate) -> None:
        """Poison outputs; poison or zero scratch as the candidate declared."""
        for g in self.outputs.values():
            g.fill(POISON)
        for s in cand.scratch:
            self.scratch[s.name].fill(0 if s.zero else POISON)


def make_buffers(task: Task, cand: Candidate, sizes: dict[str, int], host_inputs: dict[str, np.ndarray]) -> Buffers:
    outputs = {a.name: Guarded(tasks.shape_of(task, a, sizes), a.dtype) for a in task.outputs}
    return Buffers(inputs={a.name: Guarded.from_host(host_inputs[a.name]) for a in task.inputs},
                   outputs=outputs, scratch=scratch_buffers(cand, sizes))


def scratch_buffers(cand: Candidate, sizes: dict[str, int]) -> dict[str, Guarded]:
    counts = cfmt.scratch_counts(cand, sizes)
    return {s.name: Guarded((max(counts[s.name], 1),), s.dtype) for s in cand.scratch}


@dataclass(frozen=True)
class Launch:
    """One launch with its dimensions and arguments resolved (expressions evaluated once)."""

    name: str
    kernel: cp.RawKernel
    grid: tuple[int, ...]
    block: tuple[int, ...]
    smem: int
    args: tuple


def plan(program: Program, cand: Candidate, task: Task, sizes: dict[str, int],
         buffers: dict[str, cp.ndarray]) -> list[Launch]:
    """Every declared launch at these sizes on these buffers; raises LaunchRefused."""
    constants = dict(task.constants)
    out = []
    for launch, (grid, block, smem) in zip(cand.launches, cfmt.launch_dims(cand, sizes), strict=True):
        kernel = program.kernels[launch.kernel]
        args = tuple(buffers[a] if a in buffers else np.int32(sizes[a]) if a in sizes else np.float32(constants[a])
                     for a in launch.args)
        try:
            if smem and smem + program.static_smem(launch.kernel) > 48 * 1024:  # past the default limit: opt in
                cp.cuda.driver.funcSetAttribute(
                    kernel.ptr, cp.cuda.driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
        except cp.cuda.driver.CUDADriverError as e:
            raise LaunchRefused(f"{launch.kernel} grid={grid} block={block} smem={smem}: {e}") from None
        out.append(Launch(launch.kernel, kernel, grid, block, smem, args))
    return out


def enqueue(launches: list[Launch], stream: cp.cuda.Stream) -> None:
    """Enqueue planned launches on `stream`, in order; raises LaunchRefused."""
    for launch in launches:
        try:
            launch.kernel(launch.grid, launch.block, launch.args, shared_mem=launch.smem, stream=stream)
        except cp.cuda.driver.CUDADriverError as e:
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


def check_size(program: Program, cand: Candidate, task: Task, size: tuple[tuple[str, int], ...],
               host_inputs: dict[str, np.ndarray], expected: dict[str, Expected],
               stream: cp.cuda.Stream, runs: int = 2, buffers: Buffers | None = None) -> SizeCheck:
    """Run the candidate `runs` times on the same inputs; every run must match the reference,
    leave its inputs and every canary untouched. Raises LaunchRefused / ContextLost.

    Everything runs in order on `stream` (buffers, poison, launches, copies back), so nothing
    waits on another stream. `buffers` (holding `host_inputs`) may be passed in to be reused;
    a check that fails leaves them unfit for reuse. Inputs and canaries are checked after the
    last run (damage stays), and before reporting a wrong output."""
    sizes = dict(size)
    with stream:
        buf = buffers or make_buffers(task, cand, sizes, host_inputs)
        launches = plan(program, cand, task, sizes, {k: g.array for k, g in buf.all().items()})
        worst = 0.0
        for run in range(1, runs + 1):
            buf.reset(cand)
            program.reset_globals(stream)
            enqueue(launches, stream)
            synchronize(stream)
            for name, g in buf.outputs.items():
                ok, err, detail = compare(name, g.array.get(), expected[name])
                worst = max(worst, err)
                if not ok:
                    prefix = f"run {run} of {runs}: " if run > 1 else ""
                    return SizeCheck(size, False, err, damage(buf, host_inputs) or prefix + detail)
        problem = damage(buf, host_inputs)
    return SizeCheck(size, not problem, worst, problem)


def damage(buf: Buffers, host_inputs: dict[str, np.ndarray]) -> str:
    """Why the buffers show a kernel wrote where it may not ("" if they do not): an input
    changed, or a canary region next to a buffer (all canaries checked by one kernel)."""
    for name, g in buf.inputs.items():
        if not np.array_equal(g.array.get(), host_inputs[name]):
            return f"input {name} was modified (inputs are read-only)"
    broken = broken_canaries(buf.all())
    return f"wrote outside buffer {broken[0]} (canary region changed)" if broken else ""


CANARY_SOURCE = r"""
extern "C" __global__ void fsr_canaries(const unsigned long long* starts, int regions, int bytes,
                                        int value, int* bad) {
    int r = blockIdx.y;
    if (r >= regions) return;
    const unsigned char* p = (const unsigned char*)starts[r];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += gridDim.x * blockDim.x)
        if (p[i] != (unsigned char)value) bad[r] = 1;
}
"""


@functools.cache
def _canary_kernel() -> cp.RawKernel:
    return cp.RawKernel(CANARY_SOURCE, "fsr_canaries")


def broken_canaries(buffers: dict[str, Guarded]) -> list[str]:
    """Names of the buffers with a changed canary region, in order; one kernel over every
    region on the current stream and one copy back (a buffer's regions: before, after)."""
    names = list(buffers)
    starts = [p for g in buffers.values() for p in (g.raw.data.ptr, g.raw.data.ptr + PAD_BYTES + g.nbytes)]
    if not starts:
        return []
    bad = cp.zeros(len(starts), dtype=cp.int32)
    _canary_kernel()((8, len(starts)), (256,), (cp.asarray(np.array(starts, dtype=np.uint64)),
                                                  np.int32(len(starts)), np.int32(PAD_BYTES), np.int32(CANARY), bad))
    flags = bad.get()
    return list(dict.fromkeys(names[i // 2] for i in range(len(starts)) if flags[i]))


@dataclass(frozen=True)
class Expected:
    """A float64 reference prepared for fast checks: rounded to the output's dtype (far below
    any tolerance) with each element's allowed deviation, atol + rtol * |ref|, precomputed."""

    value: np.ndarray
    bound: np.ndarray


def expect(reference: np.ndarray, dtype: str, atol: float, rtol: float) -> Expected:
    ref = np.asarray(reference, dtype=np.float64)
    kind = np.dtype(dtype) if np.dtype(dtype).kind == "f" else np.dtype(np.float64)
    return Expected(ref.astype(kind), (atol + rtol * np.abs(ref)).astype(kind))


def _chunk_check(got: np.ndarray, value: np.ndarray, bound: np.ndarray) -> tuple[bool, float]:
    diff = np.abs(got - value)
    ok = bool((diff <= bound).all())  # NaN compares False, so it counts as bad
    return ok, float(diff.max()) if ok and diff.size else 0.0


def _fast_pass(got: np.ndarray, expected: Expected) -> tuple[bool, float]:
    """Whether every element passes, and the largest error if so; large arrays are checked in
    chunks on threads (numpy releases the GIL), which matters at benchmark sizes."""
    flat_got, flat_val, flat_bound = got.reshape(-1), expected.value.reshape(-1), expected.bound.reshape(-1)
    if flat_got.size < PARALLEL_ELEMENTS:
        return _chunk_check(flat_got, flat_val, flat_bound)
    edges = np.linspace(0, flat_got.size, COMPARE_THREADS + 1, dtype=np.int64)
    parts = list(_compare_pool().map(lambda i: _chunk_check(flat_got[edges[i]:edges[i + 1]],
                                                            flat_val[edges[i]:edges[i + 1]],
                                                            flat_bound[edges[i]:edges[i + 1]]),
                                     range(COMPARE_THREADS)))
    return all(ok for ok, _ in parts), max(err for _, err in parts)


@functools.cache
def _compare_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(COMPARE_THREADS, thread_name_prefix="fsr-compare")


def compare(name: str, got: np.ndarray, expected: Expected) -> tuple[bool, float, str]:
    """(passed, max abs error, first mismatches) of every element against the reference."""
    got = got.astype(expected.value.dtype, copy=False)
    ok, worst = _fast_pass(got, expected)
    if ok:
        return True, worst, ""
    diff = np.abs(got - expected.value)
    bad = ~(diff <= expected.bound)
    finite = diff[np.isfinite(diff)]
    worst = float(finite.max()) if finite.size else 0.0
    idx = np.argwhere(bad)[:MAX_SHOWN]
    shown = "; ".join(f"{name}[{', '.join(map(str, i))}] got {float(got[tuple(i)]):.6g} "
                      f"expected {float(expected.value[tuple(i)]):.6g}" for i in idx)
    unwritten = int(np.isnan(got).sum())
    note = f" ({unwritten} never written: still NaN)" if unwritten else ""
    return False, worst, f"{int(bad.sum())} of {bad.size} elements wrong{note}; {shown}"


def describe(check: SizeCheck) -> str:
    return f"at {size_label(check.size)}: {check.detail}"
