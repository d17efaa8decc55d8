"""NVRTC compilation to a cubin for one architecture, with the compiler's resource report.
Code that only the device's arch-specific variant assembles (wgmma on an sm_90 device) is
compiled again for that variant (`target_arch`); everything else for the device's own arch.

Runs on machines without a GPU (NVRTC is a library). Results are cached by content: the same
source, defines, options and architecture compile once per `CompileService`, and, where the
service has the node's disk cache (the GPU worker's and its child's do, from
`eval.compile_cache_dir`), once per node (`fsr.evaluate.compile_cache`), keyed by the source,
kernel names, options, NVRTC's version and the cache's format.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fsr.evaluate import compile_cache
from fsr.types import Candidate, Resources

# Options a candidate may ask for; anything else is refused (include paths or output files
# named by generated code have no business here).
ALLOWED_OPTIONS = re.compile(r"^(--use_fast_math|-ftz=(true|false)|-prec-div=(true|false)|-prec-sqrt=(true|false)"
                             r"|-fmad=(true|false)|--extra-device-vectorization|--maxrregcount=\d{1,3})$")
BASE_OPTIONS = ("--std=c++17", "-Xptxas=-v")
MAX_LOG_CHARS = 8000


class CompileFailed(Exception):
    """The compiler refused the code; `log` holds its (truncated) output."""

    def __init__(self, log: str):
        super().__init__(log)
        self.log = log


@dataclass(frozen=True)
class Compiled:
    """A compiled program. `seconds` is what getting it cost the compile that produced this
    object: NVRTC's time, or on a disk-cache hit the lookup's time (not the original compile's);
    an in-memory hit returns the same object again."""

    cubin: bytes
    lowered: tuple[tuple[str, str], ...]  # kernel name -> symbol in the cubin
    resources: Resources
    kernel_resources: tuple[tuple[str, Resources], ...]
    log: str
    options: tuple[str, ...]
    seconds: float
    ptx: str = ""  # what NVRTC lowered the source to, before ptxas: the guards read it (guards.check_ptx)


# NVRTC has no <math.h>: the few macros kernels reach for by habit.
PRELUDE = """#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
#ifndef FLT_MAX
#define FLT_MAX 3.402823466e+38f
#endif
"""


# The driver's tensor map type, which `cuda.h` defines (a host header, not allowed) and
# `cuda/barrier` only declares: 128 opaque bytes, given to a code that names it. fsr encodes the
# map (fsr.evaluate.gpu.launch_ex); the kernel takes it as `const __grid_constant__ CUtensorMap`.
TENSOR_MAP_PRELUDE = """#ifndef __cuda_cuda_h__
typedef struct CUtensorMap_st { alignas(64) unsigned long long opaque[16]; } CUtensorMap;
#endif
"""


def full_source(cand: Candidate) -> str:
    """The text NVRTC sees: tunable defines and the prelude first (the tensor map type where the
    code names it), then the file as written (#line keeps the compiler's line numbers equal to
    the file's)."""
    defines = "".join(f"#define {k} {v}\n" for k, v in cand.resolved_defines())
    maps = TENSOR_MAP_PRELUDE if "CUtensorMap" in cand.source else ""
    return f"{defines}{PRELUDE}{maps}#line 1 \"candidate.cu\"\n{cand.source}"


def include_dirs() -> list[str]:
    """CUDA header folders: CUDA_PATH, the pip `nvidia` packages, /usr/local/cuda."""
    roots = []
    if os.environ.get("CUDA_PATH"):
        roots.append(Path(os.environ["CUDA_PATH"]) / "include")
    spec = importlib.util.find_spec("nvidia")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            roots += [Path(loc) / "cu13" / "include", Path(loc) / "cuda_runtime" / "include"]
    roots.append(Path("/usr/local/cuda/include"))
    out: list[str] = []
    for root in roots:
        for d in (root, root / "cccl"):
            if (d / "cuda_fp16.h").is_file() or (d / "cuda").is_dir():
                if str(d) not in out:
                    out.append(str(d))
    return out


_PLAIN_ARCH = re.compile(r"sm_(\d{2,3})")
# ptxas's words for an instruction the plain arch lacks and its arch-specific variant may have
_VARIANT_ONLY = re.compile(r"not supported on \.target 'sm_\d+'")


def target_arch(arch: str) -> str:
    """The arch-specific variant of a device of `arch`, for code that needs it: from sm_90 on,
    sm_90 -> sm_90a, sm_100 -> sm_100a (wgmma, setmaxnreg and the tensor-memory copies on
    sm_90a, tcgen05 on sm_100a); an earlier arch, or one already suffixed, as it is. NVRTC 13.0
    (the version fsr installs) knows the variant of every arch it compiles for from sm_90 on.
    A candidate is compiled for it only when ptxas refuses an instruction on the plain arch, so
    every other candidate's cubin is the plain arch's, as before the variants were used.

    A cubin for sm_90a loads on an sm_90 device only, never on a later one. That is fine: fsr
    compiles per device, on the node that runs the candidate, with the arch its GPU child read
    from that device (the compile caches hold the arch in their key), so no cubin reaches a device
    of another arch."""
    m = _PLAIN_ARCH.fullmatch(arch)
    return f"{arch}a" if m and int(m.group(1)) >= 90 else arch


@functools.cache
def compiles_for(arch: str) -> bool:
    """Whether this NVRTC compiles for `arch` exactly (an empty kernel, some 30 ms; fsr's own
    source, so in this process)."""
    nvrtc = _library()
    prog = nvrtc.createProgram("__global__ void fsr_probe() {}", "probe.cu", [], [])
    try:
        nvrtc.compileProgram(prog, [f"--gpu-architecture={arch}"])
        return True
    except nvrtc.NVRTCError:
        return False
    finally:
        nvrtc.destroyProgram(prog)


class Compiler(Protocol):
    """Where a process compiles what its caches miss (fsr.evaluate.compile_pool.CompilePool)."""

    def compile(self, source: str, kernels: tuple[str, ...], options: tuple[str, ...]) -> Compiled:
        """What `nvrtc` returns for these arguments; raises CompileFailed."""
        ...

    def close(self) -> None:
        """Stop whatever it runs."""
        ...


class CompileService:
    """Compiled programs by content: the last `size` in memory, then the node's disk cache `disk`
    (fsr.evaluate.compile_cache.open_cache; None: no disk cache). A miss compiles in `pool`, the
    bounded compile processes that proposer code needs (fsr.evaluate.compile_pool.worker_compiler
    builds a service with both from the configuration), or, without one, in this process, for
    trusted code only: task baselines in tests and tools, a user's own file in `fsr launch`.
    Whoever compiles is handed one; the one who built it closes it."""

    def __init__(self, disk: compile_cache.DiskCache | None = None, pool: Compiler | None = None,
                 size: int = 512) -> None:
        self.size = size
        self.memory: OrderedDict[str, Compiled] = OrderedDict()
        self.lock = threading.Lock()  # tuning trials compile on several threads at once
        self.disk = disk
        self.pool = pool
        self.needs_variant: set[str] = set()  # plain-arch keys whose code only the arch's variant compiles

    def compile(self, cand: Candidate, arch: str) -> Compiled:
        """Compile for a device of `arch` (e.g. "sm_90"); where ptxas refuses an instruction
        that only the arch's variant has, for `target_arch(arch)` instead. Raises CompileFailed
        with the compiler's log. Looks in memory, then on disk; failures are not cached."""
        bad = [o for o in cand.compile_options if not ALLOWED_OPTIONS.match(o)]
        if bad:
            raise CompileFailed(f"compile option(s) not allowed: {' '.join(bad)}")
        source = full_source(cand)
        kernels = tuple(dict.fromkeys(launch.kernel for launch in cand.launches))
        plain = (f"--gpu-architecture={arch}",) + BASE_OPTIONS + cand.compile_options
        variant = (f"--gpu-architecture={target_arch(arch)}",) + plain[1:]
        key = _key(source, kernels, plain)
        if variant != plain and key in self.needs_variant:  # known from an earlier compile
            return self._compile(source, kernels, variant, _key(source, kernels, variant))
        try:
            return self._compile(source, kernels, plain, key)
        except CompileFailed as e:
            if variant == plain or not _VARIANT_ONLY.search(str(e)):
                raise
        result = self._compile(source, kernels, variant, _key(source, kernels, variant))
        with self.lock:
            self.needs_variant.add(key)
        return result

    def _compile(self, source: str, kernels: tuple[str, ...], options: tuple[str, ...], key: str) -> Compiled:
        result = self._get(key)
        if result is not None:
            return result
        disk = self.disk
        result = _from_disk(disk, key, kernels, options) if disk else None
        if result is None:
            result = self._miss(source, kernels, options)  # outside the lock: compiles run concurrently
            if disk:
                compile_cache.store(disk, key, compile_cache.Entry(
                    result.cubin, result.lowered, result.kernel_resources, result.log, result.ptx))
        self._put(key, result)
        return result

    def close(self) -> None:
        """Stop the compile pool's processes, if there is a pool."""
        if self.pool is not None:
            self.pool.close()

    def _get(self, key: str) -> Compiled | None:
        with self.lock:
            if key not in self.memory:
                return None
            self.memory.move_to_end(key)
            return self.memory[key]

    def _put(self, key: str, compiled: Compiled) -> None:
        with self.lock:
            self.memory[key] = compiled
            if len(self.memory) > self.size:
                self.memory.popitem(last=False)

    def _miss(self, source: str, kernels: tuple[str, ...], options: tuple[str, ...]) -> Compiled:
        pool = self.pool
        return pool.compile(source, kernels, options) if pool is not None else nvrtc(source, kernels, options)


def _key(source: str, kernels: tuple[str, ...], options: tuple[str, ...]) -> str:
    """A program's key in the compile caches: everything that decides its cubin."""
    return hashlib.sha256(repr((compile_cache.CACHE_FORMAT, toolchain_id(), source, kernels, options)).encode()).hexdigest()


@functools.cache
def toolchain_id() -> str:
    """What decides the cubin besides source and options: NVRTC's version and the versions of the
    pip packages that ship it and the CUDA headers (NVRTC reports major.minor only)."""
    packages = []
    for name in ("nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "nvidia-cuda-cccl"):
        try:
            packages.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return "; ".join([nvrtc_version(), *packages, *include_dirs()])


def _from_disk(disk: compile_cache.DiskCache, key: str, kernels: tuple[str, ...],
               options: tuple[str, ...]) -> Compiled | None:
    """The program the disk cache holds under `key`, or None; its `seconds` are the lookup's."""
    start = time.perf_counter()
    entry = compile_cache.load(disk, key, kernels)
    if entry is None:
        return None
    return Compiled(cubin=entry.cubin, lowered=entry.lowered,
                    resources=_max_resources([r for _, r in entry.kernel_resources]),
                    kernel_resources=entry.kernel_resources, log=entry.log, options=options,
                    seconds=time.perf_counter() - start, ptx=entry.ptx)


# NVRTC opens its builtins library (libnvrtc-builtins) as it compiles, and compiles on several
# threads of one process at once sometimes fail there ("failed to open libnvrtc-builtins.so.13.0":
# the pip wheels, two threads, seen about one time in twenty after some other tests): a fault of
# no kernel's, so such a compile is made again, and past BUILTINS_ATTEMPTS it is fsr's fault
# (CompilerUnavailable), never a compile error of the candidate.
BUILTINS_UNOPENED = re.compile(r"failed to open libnvrtc-builtins")
BUILTINS_ATTEMPTS = 4
BUILTINS_BACKOFF_S = 0.05


def nvrtc(source: str, kernels: tuple[str, ...], options: tuple[str, ...]) -> Compiled:
    """Compile in this process (what a compile-pool process runs); raises CompileFailed, or
    CompilerUnavailable where NVRTC cannot open its own builtins library (BUILTINS_UNOPENED)."""
    nvrtc = _library()  # NVRTC alone: no CUDA device or context needed

    start = time.perf_counter()
    all_options = list(options) + [f"--include-path={d}" for d in include_dirs()]
    failed = ""
    for attempt in range(1, BUILTINS_ATTEMPTS + 1):
        prog = nvrtc.createProgram(source, "candidate.cu", [], [])
        try:
            for k in kernels:
                nvrtc.addNameExpression(prog, k)
            try:
                nvrtc.compileProgram(prog, all_options)
            except nvrtc.NVRTCError:
                failed = nvrtc.getProgramLog(prog)
                if not BUILTINS_UNOPENED.search(failed):
                    raise CompileFailed(_truncate(failed)) from None
            else:
                log = nvrtc.getProgramLog(prog)
                lowered = tuple((k, nvrtc.getLoweredName(prog, k)) for k in kernels)
                cubin = nvrtc.getCUBIN(prog)
                ptx = nvrtc.getPTX(prog).decode(errors="replace").rstrip("\0")
                break
        finally:
            nvrtc.destroyProgram(prog)
        if attempt < BUILTINS_ATTEMPTS:
            time.sleep(BUILTINS_BACKOFF_S * attempt)
    else:  # NVRTC's own library, every time: fsr's fault, no kernel's
        raise CompilerUnavailable(f"NVRTC could not open its builtins library in {BUILTINS_ATTEMPTS} attempts: "
                                  f"{' '.join(failed.split())[:200]}")
    per_kernel = parse_resources(log)
    mine = tuple((k, _lookup(per_kernel, k, sym)) for k, sym in lowered)
    return Compiled(cubin=cubin, lowered=lowered, resources=_max_resources([r for _, r in mine]),
                    kernel_resources=mine, log=_truncate(log), options=options,
                    seconds=time.perf_counter() - start, ptx=ptx)


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_resources(log: str) -> dict[str, Resources]:
    """Per-entry-function resources from ptxas's verbose report."""
    out: dict[str, Resources] = {}
    current = None
    fields: dict[str, int] = {}
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            if current:
                out[current] = Resources(**fields)
            current, fields = m.group(1), {}
        elif current and (m := _FRAME.search(line)):
            fields["stack_bytes"] = int(m.group(1))
            fields["spill_bytes"] = int(m.group(2)) + int(m.group(3))
        elif current and (m := _USED.search(line)):
            fields["registers"] = int(m.group(1))
            fields["smem_static_bytes"] = int(m.group(2) or 0)
    if current:
        out[current] = Resources(**fields)
    return out


def _lookup(per_kernel: dict[str, Resources], name: str, symbol: str) -> Resources:
    """The report of one kernel, by its lowered symbol, else by its plain name, else the only one."""
    if symbol in per_kernel:
        return per_kernel[symbol]
    if name in per_kernel:
        return per_kernel[name]
    matches = [r for entry, r in per_kernel.items() if name in entry]
    if len(matches) == 1 or len(per_kernel) == 1:
        return matches[0] if matches else next(iter(per_kernel.values()))
    return Resources()


def _max_resources(items: list[Resources]) -> Resources:
    if not items:
        return Resources()
    return Resources(registers=max(r.registers for r in items), spill_bytes=max(r.spill_bytes for r in items),
                     smem_static_bytes=max(r.smem_static_bytes for r in items),
                     stack_bytes=max(r.stack_bytes for r in items))


def _truncate(log: str) -> str:
    log = log.strip()
    if len(log) <= MAX_LOG_CHARS:
        return log
    half = MAX_LOG_CHARS // 2
    return f"{log[:half]}\n... [{len(log) - MAX_LOG_CHARS} characters cut] ...\n{log[-half:]}"


class CompilerUnavailable(RuntimeError):
    """NVRTC cannot be loaded here: the machine's install is incomplete, never a candidate's
    fault (a campaign's worker treats it as its own failure; a command says it in one line)."""


@functools.cache
def _library() -> Any:
    """CuPy's NVRTC binding, once the library has been found and answered."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as e:  # ImportError, OSError, cuda-pathfinder's DynamicLibNotFoundError
        raise CompilerUnavailable(
            f"NVRTC cannot be loaded ({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
            "fsr's install brings it as the nvidia-cuda-nvrtc package: pip install -e .") from None
    return nvrtc


def nvrtc_version() -> str:
    major, minor = _library().getVersion()
    return f"nvrtc {major}.{minor}"
