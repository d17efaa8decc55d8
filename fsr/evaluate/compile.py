"""NVRTC compilation to a cubin for one architecture, with the compiler's resource report.

Runs on machines without a GPU (NVRTC is a library). Results are cached by content: the same
source, defines, options and architecture compile once per process, and, once `use_disk_cache`
names a directory (the GPU worker and its child do, from `eval.compile_cache_dir`), once per
node: one JSON file per program, keyed by the source, kernel names, options, NVRTC's version and
`CACHE_FORMAT`, shared by every process, least recently used entries pruned past a byte limit.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

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


def full_source(cand: Candidate) -> str:
    """The text NVRTC sees: tunable defines and the prelude first, then the file as written
    (#line keeps the compiler's line numbers equal to the file's)."""
    defines = "".join(f"#define {k} {v}\n" for k, v in cand.resolved_defines())
    return f"{defines}{PRELUDE}#line 1 \"candidate.cu\"\n{cand.source}"


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


_CACHE: OrderedDict[str, Compiled] = OrderedDict()
_CACHE_SIZE = 512
_CACHE_LOCK = threading.Lock()  # tuning trials compile on several threads at once


def compile_candidate(cand: Candidate, arch: str) -> Compiled:
    """Compile for `arch` (e.g. "sm_90"); raises CompileFailed with the compiler's log. Looks in
    this process's cache, then in the disk cache (see `use_disk_cache`); failures are not cached."""
    bad = [o for o in cand.compile_options if not ALLOWED_OPTIONS.match(o)]
    if bad:
        raise CompileFailed(f"compile option(s) not allowed: {' '.join(bad)}")
    source = full_source(cand)
    kernels = tuple(dict.fromkeys(launch.kernel for launch in cand.launches))
    options = (f"--gpu-architecture={arch}",) + BASE_OPTIONS + cand.compile_options
    key = hashlib.sha256(repr((CACHE_FORMAT, toolchain_id(), source, kernels, options)).encode()).hexdigest()
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    disk = _DISK
    result = _load(disk, key, kernels, options) if disk else None
    if result is None:
        result = _nvrtc(source, kernels, options)  # outside the lock: compiles run concurrently
        if disk:
            _store(disk, key, kernels, result)
    with _CACHE_LOCK:
        _CACHE[key] = result
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return result


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


# -- the disk cache ----------------------------------------------------------------------------
# One JSON file per program (never pickle: a cache directory is only data), written to a temp
# file beside it and renamed into place, so readers see a whole entry or none and two processes
# storing one entry at once both succeed. Problems with the directory never fail a compile:
# they are logged once per process and the compile goes on without the cache.

CACHE_FORMAT = 1  # part of every key: bump it when an entry's fields or their meaning change
DEFAULT_CACHE_MAX_BYTES = 2 * 1024**3
PRUNE_EVERY = 64  # a process checks the directory's size at its first store and every this many after
PRUNE_TO = 0.8  # a prune removes entries until the directory is this fraction of its limit
TOUCH_AFTER_S = 600.0  # a hit refreshes its entry's mtime (its age for pruning) at most this often
STALE_TEMP_S = 3600.0  # a temp file this old was left by a killed writer
_log = logging.getLogger(__name__)


@dataclass
class _DiskCache:
    root: Path
    max_bytes: int
    stores: int = 0  # by this process
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)  # guards `stores`
    pruning: threading.Lock = dataclasses.field(default_factory=threading.Lock)  # one prune at a time


_DISK: _DiskCache | None = None
_WARNED: set[str] = set()


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/fsr/compile, else ~/.cache/fsr/compile."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "fsr" / "compile"


def use_disk_cache(setting: str | os.PathLike[str] | None, max_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> Path | None:
    """Share compiled programs with every process of this node through a directory, for this
    process: `setting` is `eval.compile_cache_dir` ("" = `default_cache_dir()`, "off" or None = no
    disk cache) or a path. Returns the directory in use, or None. Until this is called a process
    compiles without the disk cache."""
    global _DISK
    _DISK = None
    if setting is None or setting == "off":
        return None
    root = None
    try:
        root = Path(setting).expanduser() if setting else default_cache_dir()
        root.mkdir(mode=0o700, parents=True, exist_ok=True)  # an existing one (even read-only) is fine
        if root.stat().st_uid != os.getuid():  # another user's cubins would run on this GPU
            _warn_once("owner", f"compile cache {root} belongs to another user; compiling without it")
            return None
    except (OSError, RuntimeError, ValueError) as e:  # RuntimeError: no home folder for ~
        _warn_once("folder", f"compile cache {root or setting or '~/.cache/fsr/compile'} cannot be used "
                             f"({e}); compiling without it")
        return None
    _DISK = _DiskCache(root, max_bytes)
    return root


def _entry_path(root: Path, key: str) -> Path:
    return root / key[:2] / f"{key}.json"  # 256 subfolders keep each folder small


def _load(disk: _DiskCache, key: str, kernels: tuple[str, ...], options: tuple[str, ...]) -> Compiled | None:
    """The program stored under `key`, or None; a damaged entry is removed."""
    start = time.perf_counter()
    path = _entry_path(disk.root, key)
    try:
        with path.open("rb") as f:
            data, mtime = f.read(), os.fstat(f.fileno()).st_mtime
    except FileNotFoundError:
        return None
    except OSError as e:
        _warn_once("read", f"compile cache entry {path} cannot be read ({e}); compiling instead")
        return None
    try:
        entry = json.loads(data)
        if entry["format"] != CACHE_FORMAT or entry["key"] != key or tuple(entry["options"]) != options:
            raise ValueError("an entry of another format or key")
        lowered = tuple((str(k), str(sym)) for k, sym in entry["lowered"])
        mine = tuple((str(k), Resources(**{f: int(v) for f, v in r.items()})) for k, r in entry["kernel_resources"])
        if tuple(k for k, _ in lowered) != kernels or tuple(k for k, _ in mine) != kernels:
            raise ValueError("kernel names differ")
        cubin = base64.b64decode(entry["cubin"], validate=True)
        compiled = Compiled(cubin=cubin, lowered=lowered, resources=_max_resources([r for _, r in mine]),
                            kernel_resources=mine, log=str(entry["log"]), options=options, seconds=0.0)
    except Exception as e:  # whatever damage raises while this is read, the answer is to compile
        _warn_once("corrupt", f"compile cache entry {path} is damaged ({e}); compiling it again", logging.DEBUG)
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    if time.time() - mtime > TOUCH_AFTER_S:
        with contextlib.suppress(OSError):  # a read-only cache still serves hits
            os.utime(path)
    return dataclasses.replace(compiled, seconds=time.perf_counter() - start)


def _store(disk: _DiskCache, key: str, kernels: tuple[str, ...], compiled: Compiled) -> None:
    entry = {"format": CACHE_FORMAT, "key": key, "kernels": list(kernels), "options": list(compiled.options),
             "lowered": [list(pair) for pair in compiled.lowered],
             "kernel_resources": [[k, dataclasses.asdict(r)] for k, r in compiled.kernel_resources],
             "log": compiled.log, "cubin": base64.b64encode(compiled.cubin).decode("ascii")}
    path = _entry_path(disk.root, key)
    temp = None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)  # mode 0o600
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(entry, separators=(",", ":")).encode())
        os.replace(temp, path)
    except OSError as e:  # unwritable, read-only, disk full: the compile stands without its entry
        _warn_once("write", f"compile cache {disk.root} cannot be written ({e}); compiling without storing")
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        return
    with disk.lock:
        disk.stores += 1
        due = (disk.stores - 1) % PRUNE_EVERY == 0
    if due:
        _prune(disk)


def _prune(disk: _DiskCache) -> None:
    """Remove the least recently used entries (oldest mtime first) while the directory holds more
    than its limit, down to PRUNE_TO of it; and temp files that killed writers left."""
    if not disk.pruning.acquire(blocking=False):
        return
    try:
        entries, total, now = [], 0, time.time()
        with os.scandir(disk.root) as folders:
            for folder in folders:
                if len(folder.name) != 2 or not folder.is_dir(follow_symlinks=False):
                    continue
                with os.scandir(folder.path) as files:
                    for f in files:
                        try:
                            st = f.stat(follow_symlinks=False)
                            if f.name.endswith(".tmp") and now - st.st_mtime > STALE_TEMP_S:
                                os.unlink(f.path)
                            elif f.name.endswith(".json"):
                                entries.append((st.st_mtime, st.st_size, f.path))
                                total += st.st_size
                        except FileNotFoundError:
                            continue  # another process pruned it
        if total <= disk.max_bytes:
            return
        for _, size, path in sorted(entries):
            if total <= disk.max_bytes * PRUNE_TO:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            total -= size
    except OSError as e:
        _warn_once("prune", f"compile cache {disk.root} cannot be pruned ({e})")
    finally:
        disk.pruning.release()


def _warn_once(kind: str, message: str, level: int = logging.WARNING) -> None:
    """Log a cache problem the first time one of its kind happens in this process."""
    if kind not in _WARNED:
        _WARNED.add(kind)
        _log.log(level, message)


def _nvrtc(source: str, kernels: tuple[str, ...], options: tuple[str, ...]) -> Compiled:
    from cupy_backends.cuda.libs import nvrtc  # NVRTC alone: no CUDA device or context needed

    start = time.perf_counter()
    prog = nvrtc.createProgram(source, "candidate.cu", [], [])
    try:
        for k in kernels:
            nvrtc.addNameExpression(prog, k)
        all_options = list(options) + [f"--include-path={d}" for d in include_dirs()]
        try:
            nvrtc.compileProgram(prog, all_options)
        except nvrtc.NVRTCError:
            raise CompileFailed(_truncate(nvrtc.getProgramLog(prog))) from None
        log = nvrtc.getProgramLog(prog)
        lowered = tuple((k, nvrtc.getLoweredName(prog, k)) for k in kernels)
        cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    per_kernel = parse_resources(log)
    mine = tuple((k, _lookup(per_kernel, k, sym)) for k, sym in lowered)
    return Compiled(cubin=cubin, lowered=lowered, resources=_max_resources([r for _, r in mine]),
                    kernel_resources=mine, log=_truncate(log), options=options,
                    seconds=time.perf_counter() - start)


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


def nvrtc_version() -> str:
    from cupy_backends.cuda.libs import nvrtc

    major, minor = nvrtc.getVersion()
    return f"nvrtc {major}.{minor}"
