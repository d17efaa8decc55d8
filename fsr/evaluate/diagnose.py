"""Digested diagnostics of a compiled candidate, for the model's feedback: a few lines of facts.

Read on the host from the cubin's machine code (SASS, disassembled by nvdisasm from the
nvidia-cuda-nvdisasm package): global loads and stores by width, tensor-core instructions,
local-memory traffic, shared-memory accesses and barriers; from the compiler's report and the
launch at the benchmark size, the theoretical occupancy; with the measured timing, the roofline
class and the fraction reached; and one line naming what most likely limits the kernel.

SASS rather than PTX: the cubin is what runs, and what matters here is decided by ptxas after PTX
(whether loads were merged into 128-bit ones, spills to local memory, which MMA instructions
remain). Counts are static (instructions in the code, not executions). Without nvdisasm, or
when anything here fails, the result says "diagnostics unavailable": never an error, never a
change of verdict. Pure host code: no GPU, no CuPy.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from fsr import candidate as cfmt
from fsr import tasks
from fsr.evaluate.compile import Compiled, CompileService
from fsr.types import Candidate, DeviceInfo, Evaluation, Resources, Task, Timing

UNAVAILABLE = "diagnostics unavailable"
DISASSEMBLE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ArchLimits:
    """What bounds resident blocks on one SM of an architecture (CUDA's occupancy tables)."""

    max_warps: int
    max_blocks: int
    smem_per_sm: int  # bytes a kernel's blocks may share, at the largest carve-out
    regs: int = 65536
    reg_unit: int = 256  # registers are given to a warp in units of this many
    smem_unit: int = 128
    smem_reserved: int = 1024  # per block, taken by the system


LIMITS = {
    "sm_80": ArchLimits(64, 32, 164 * 1024),
    "sm_86": ArchLimits(48, 16, 100 * 1024),
    "sm_89": ArchLimits(48, 24, 100 * 1024),
    "sm_90": ArchLimits(64, 32, 228 * 1024),
}


@dataclass
class Mix:
    """One kernel's instructions of interest, counted in its code."""

    loads: Counter[int] = field(default_factory=Counter)  # global (and generic) loads by width in bits
    stores: Counter[int] = field(default_factory=Counter)
    local_loads: int = 0
    local_stores: int = 0
    shared: int = 0  # shared-memory loads, stores and ldmatrix
    async_copies: int = 0  # cp.async and TMA copies into shared memory
    barriers: int = 0
    tensor: Counter[str] = field(default_factory=Counter)  # HMMA, IMMA, HGMMA... by opcode
    atomics: int = 0
    instructions: int = 0


# ---- the disassembler ---------------------------------------------------------------------------

@functools.cache
def nvdisasm() -> str | None:
    """nvdisasm's path: the pip `nvidia` packages, CUDA_PATH, /usr/local/cuda, PATH; None if absent."""
    places = []
    spec = importlib.util.find_spec("nvidia")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            places += [Path(loc) / "cu13" / "bin", Path(loc) / "cuda_nvdisasm" / "bin"]
    if os.environ.get("CUDA_PATH"):
        places.append(Path(os.environ["CUDA_PATH"]) / "bin")
    places.append(Path("/usr/local/cuda/bin"))
    for place in places:
        if os.access(place / "nvdisasm", os.X_OK):
            return str(place / "nvdisasm")
    return shutil.which("nvdisasm")


def whole_elf(cubin: bytes) -> bytes:
    """The cubin padded to the end its ELF header declares: NVRTC's binding hands it back without
    its last (zero) byte, which the driver forgives and nvdisasm does not."""
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF":
        return cubin
    phoff, shoff = struct.unpack_from("<QQ", cubin, 0x20)
    phsize, phnum, shsize, shnum = struct.unpack_from("<HHHH", cubin, 0x36)
    end = max(phoff + phsize * phnum, shoff + shsize * shnum)
    return cubin + b"\0" * (end - len(cubin)) if 0 < end - len(cubin) < 4096 else cubin


def disassemble(cubin: bytes) -> dict[str, list[str]] | None:
    """Each function's instructions (predicate dropped, operands kept) by symbol; None when
    nvdisasm is missing or fails."""
    tool = nvdisasm()
    if tool is None:
        return None
    with tempfile.TemporaryDirectory(prefix="fsr-sass-") as d:
        path = Path(d) / "program.cubin"
        path.write_bytes(whole_elf(cubin))
        try:
            done = subprocess.run([tool, "-c", str(path)], capture_output=True, text=True,
                                  timeout=DISASSEMBLE_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
    if done.returncode != 0:
        return None
    return parse_sass(done.stdout)


_SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)")
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def parse_sass(text: str) -> dict[str, list[str]]:
    """Opcodes with their modifiers (`LDG.E.128`) per function of nvdisasm's listing."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if m := _SECTION.match(line):
            current = out.setdefault(m.group(1), [])
        elif current is not None and (m := _INSTRUCTION.search(line)):
            if m.group(1) != "NOP":  # alignment padding
                current.append(m.group(1))
    return out


def _width(modifiers: list[str]) -> int:
    for mod in modifiers:
        if mod in ("64", "128"):
            return int(mod)
        if mod in ("U8", "S8"):
            return 8
        if mod in ("U16", "S16"):
            return 16
    return 32


_TENSOR = re.compile(r"^(?:[HIDQB]MMA|[HIDQB]GMMA|UTC\w*MMA|OMMA)$")


def mix(opcodes: list[str]) -> Mix:
    """Count what the feedback speaks of in one function's opcodes."""
    out = Mix(instructions=len(opcodes))
    for op in opcodes:
        name, *mods = op.split(".")
        if name in ("LDG", "LD"):
            out.loads[_width(mods)] += 1
        elif name in ("STG", "ST"):
            out.stores[_width(mods)] += 1
        elif name == "LDL":
            out.local_loads += 1
        elif name == "STL":
            out.local_stores += 1
        elif name in ("LDS", "STS", "LDSM", "STSM", "ATOMS"):
            out.shared += 1
        elif name in ("LDGSTS", "UBLKCP", "UTMALDG"):
            out.async_copies += 1
        elif name == "BAR" and "ARV" not in mods:
            out.barriers += 1
        elif _TENSOR.match(name):
            out.tensor[name] += 1
        if name in ("ATOMG", "RED", "ATOM", "REDG"):
            out.atomics += 1
    return out


# ---- occupancy and roofline ---------------------------------------------------------------------

@dataclass(frozen=True)
class Occupancy:
    warps: int  # resident warps an SM
    max_warps: int
    limiter: str  # "threads", "blocks", "registers" or "shared memory"

    @property
    def fraction(self) -> float:
        return self.warps / self.max_warps


def occupancy(arch: str, threads: int, registers: int, smem_bytes: int) -> Occupancy | None:
    """Theoretical occupancy of a block of `threads` using `registers` a thread and `smem_bytes`
    of shared memory (static and dynamic); None for an architecture not in LIMITS."""
    limits = LIMITS.get(re.sub(r"[af]$", "", arch))
    if limits is None or threads < 1:
        return None
    warps = -(-threads // 32)
    per_warp = -(-max(registers, 1) * 32 // limits.reg_unit) * limits.reg_unit
    smem = -(-(smem_bytes + limits.smem_reserved) // limits.smem_unit) * limits.smem_unit
    bounds = {"threads": limits.max_warps // warps, "blocks": limits.max_blocks,
              "registers": (limits.regs // per_warp) // warps, "shared memory": limits.smem_per_sm // smem}
    limiter = min(bounds, key=lambda k: bounds[k])
    return Occupancy(min(bounds.values()) * warps, limits.max_warps, limiter)


@dataclass(frozen=True)
class Roofline:
    memory_bound: bool
    intensity: float  # flops per byte of the task at the benchmark size
    balance: float  # the device's: measured SGEMM flops per measured copy byte (0: unknown)
    fraction: float | None  # of the bounding ceiling, with a timing


def roofline(task: Task, device: DeviceInfo, timing: Timing | None) -> Roofline | None:
    """Memory- or compute-bound at the benchmark size, and the fraction reached; None without
    the device's measured copy bandwidth."""
    if not device.copy_gbps:
        return None
    sizes = dict(task.bench_size)
    moved, flops = tasks.bytes_moved(task, sizes), tasks.flops(task, sizes)
    intensity = flops / moved if moved else math.inf
    balance = device.sgemm_tflops * 1e3 / device.copy_gbps if device.sgemm_tflops else 0.0
    memory = not flops or not balance or intensity < balance
    fraction = None
    if timing is not None:
        fraction = timing.gbps / device.copy_gbps if memory else timing.tflops / device.sgemm_tflops
    return Roofline(memory, intensity, balance, fraction)


# ---- the text -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Kernel:
    name: str
    mix: Mix
    resources: Resources
    launch: tuple[tuple[int, ...], tuple[int, ...], int] | None  # grid, block, dynamic smem
    occupancy: Occupancy | None


def diagnose(cubin: bytes, lowered: tuple[tuple[str, str], ...],
             kernel_resources: tuple[tuple[str, Resources], ...], cand: Candidate, task: Task,
             device: DeviceInfo, timing: Timing | None, arch: str = "") -> str:
    """A few lines of facts about a compiled candidate (see the module docstring); "diagnostics
    unavailable" where the machine code cannot be read. `cand` carries the defines it ran with."""
    try:
        functions = disassemble(cubin)
        if functions is None:
            return UNAVAILABLE + " (nvdisasm not found or failed)"
        kernels = _kernels(functions, lowered, kernel_resources, cand, task, arch or device.arch)
        if not kernels:
            return UNAVAILABLE + " (no kernel in the machine code)"
        bound = roofline(task, device, timing)
        lines = [f"- {_kernel_line(k)}" for k in kernels]
        if bound is not None:
            lines.append(f"- {_roofline_line(bound, timing)}")
        lines.append(f"- Most likely limit: {limit(kernels, bound, device)}")
        return "\n".join(lines)
    except Exception as e:  # noqa: BLE001  (feedback is optional: never an error, never a verdict)
        return f"{UNAVAILABLE} ({type(e).__name__})"


def _kernels(functions: dict[str, list[str]], lowered: tuple[tuple[str, str], ...],
             kernel_resources: tuple[tuple[str, Resources], ...], cand: Candidate, task: Task,
             arch: str) -> list[Kernel]:
    resources = dict(kernel_resources)
    try:
        running = cfmt.launches_at(cand, dict(task.bench_size))
    except cfmt.HeaderError:
        running = []
    first_launch: dict[str, tuple[tuple[int, ...], tuple[int, ...], int]] = {}
    for spec, dim in running:
        first_launch.setdefault(spec.kernel, dim)
    out = []
    for name, symbol in lowered:
        if symbol not in functions:
            continue
        res = resources.get(name, Resources())
        launch = first_launch.get(name)
        occ = None
        if launch is not None and res.registers:
            occ = occupancy(arch, math.prod(launch[1]), res.registers, res.smem_static_bytes + launch[2])
        out.append(Kernel(name, mix(functions[symbol]), res, launch, occ))
    return out


def _widths(counts: Counter[int]) -> str:
    return ", ".join(f"{counts[w]} x {w}-bit" for w in sorted(counts, reverse=True)) or "none"


def _kernel_line(k: Kernel) -> str:
    m = k.mix
    parts = [f"global loads {_widths(m.loads)}; stores {_widths(m.stores)}"]
    parts.append("tensor-core instructions " + ", ".join(f"{n} {op}" for op, n in sorted(m.tensor.items()))
                 if m.tensor else "no tensor-core instructions")
    parts.append(f"local memory {m.local_loads} loads, {m.local_stores} stores" if m.local_loads or m.local_stores
                 else "no local memory")
    smem = k.resources.smem_static_bytes + (k.launch[2] if k.launch else 0)
    parts.append(f"shared memory {_size(smem)} ({m.shared} accesses, {m.async_copies} async copies, "
                 f"{m.barriers} barriers)" if smem or m.shared else "no shared memory")
    if m.atomics:
        parts.append(f"{m.atomics} global atomics")
    text = f"{k.name} ({m.instructions} instructions in the code): " + "; ".join(parts)
    if k.launch is not None:
        grid, block = math.prod(k.launch[0]), math.prod(k.launch[1])
        text += f". At the benchmark size {grid} blocks of {block} threads, {k.resources.registers} registers a thread"
        if k.occupancy is not None:
            o = k.occupancy
            text += (f": theoretical occupancy {o.fraction:.0%} ({o.warps} of {o.max_warps} warps an SM, "
                     f"bound by {o.limiter})")
    return text + "."


def _roofline_line(r: Roofline, timing: Timing | None) -> str:
    balance = f", the device's balance {r.balance:.3g}" if r.balance else ""
    kind = "memory-bound" if r.memory_bound else "compute-bound"
    text = f"Roofline at the benchmark size: {kind} ({r.intensity:.3g} flop/byte{balance})"
    if timing is not None and r.fraction is not None:
        reached = (f"{timing.gbps:.0f} GB/s, {r.fraction:.0%} of the measured copy bandwidth" if r.memory_bound
                   else f"{timing.tflops:.3g} TFLOP/s, {r.fraction:.0%} of the measured SGEMM rate")
        text += f"; median {timing.median_us:.4g} us: {reached}"
    return text + "."


def limit(kernels: list[Kernel], bound: Roofline | None, device: DeviceInfo) -> str:
    """One line: what most likely limits the kernel, from the facts above (first that applies)."""
    local = sum(k.mix.local_loads + k.mix.local_stores for k in kernels)
    if local:
        return (f"local memory: {local} local loads and stores in the code (spills or an indexed array); keep "
                "that data in registers (fixed indices) or in shared memory.")
    memory = bound is not None and bound.memory_bound
    reached = bound.fraction if bound is not None else None
    if memory and reached is not None and reached >= 0.75:
        return f"memory bandwidth: {reached:.0%} of the copy rate; only moving fewer bytes would help."
    launched = [k for k in kernels if k.launch is not None]
    widest = max(launched, key=lambda k: math.prod(k.launch[0]) if k.launch else 0, default=None)
    if widest is not None and widest.launch and device.sm_count and math.prod(widest.launch[0]) < device.sm_count:
        return (f"parallelism: the largest launch has {math.prod(widest.launch[0])} blocks for "
                f"{device.sm_count} SMs; split the work over more blocks.")
    low = [k for k in kernels if k.occupancy is not None and k.occupancy.fraction < 0.25]
    if low:
        o = low[0].occupancy
        assert o is not None
        return f"occupancy: {low[0].name} keeps {o.fraction:.0%} of the warps an SM holds, bound by {o.limiter}."
    if memory and not any(w > 32 for k in kernels for w in (*k.mix.loads, *k.mix.stores)):
        return "memory instructions: every global load and store is 32-bit or narrower; use 128-bit (float4) accesses."
    if bound is not None and not bound.memory_bound and not any(k.mix.tensor for k in kernels):
        return "arithmetic on the CUDA cores: the task is compute-bound here and the code has no tensor-core instructions."
    if reached is not None:
        return (f"latency: {reached:.0%} of the bound with wide accesses and enough warps; fewer passes over "
                "memory, fewer dependent steps, or more independent work in flight per thread.")
    return "not known without a timing."


def _size(n: int) -> str:
    return f"{n / 1024:.3g} KiB" if n >= 1024 else f"{n} B"


def of_evaluation(cand: Candidate, program: Compiled, evaluation: Evaluation, task: Task, device: DeviceInfo,
                  compiler: CompileService) -> str:
    """`diagnose` for an evaluated candidate: the program at the defines it was tuned to (from
    `compiler`'s caches, where tuning compiled it), else the one compiled at its defaults."""
    if evaluation.tuned_defines and dict(evaluation.tuned_defines) != dict(cand.resolved_defines()):
        tuned = cfmt.with_defines(cand, dict(evaluation.tuned_defines))
        try:
            program, cand = compiler.compile(tuned, device.arch), tuned
        except Exception:  # noqa: BLE001  (the defaults' program still says most of it)
            pass
    return diagnose(program.cubin, program.lowered, program.kernel_resources, cand, task, device,
                    evaluation.timing)
