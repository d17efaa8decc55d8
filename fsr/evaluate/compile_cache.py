"""The disk cache of compiled programs, shared by every process of a node (GPU workers, their GPU
children, `fsr eval`, a resumed run): one JSON file per program, named by the key
`fsr.evaluate.compile` computes (everything that decides the cubin, with `CACHE_FORMAT`), least
recently used entries pruned past a byte limit. A `fsr.evaluate.compile.CompileService` uses the
folder `open_cache` opens here; one built without it compiles without a disk cache.

One file per program (never pickle: a cache folder is only data), written to a temp file beside
it and renamed into place, so readers see a whole entry or none and two processes storing one
entry at once both succeed. Problems with the folder never fail a compile: they are logged once
per process and the compile goes on without the cache.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from fsr.evaluate import lru_folder
from fsr.types import Resources

CACHE_FORMAT = 3  # part of every key: bump it when an entry's fields or their meaning change
DEFAULT_CACHE_MAX_BYTES = 2 * 1024**3
PRUNE_EVERY = 64  # a process checks the directory's size at its first store and every this many after
PRUNE_TO = 0.8  # a prune removes entries until the directory is this fraction of its limit
TOUCH_AFTER_S = 600.0  # a hit refreshes its entry's mtime (its age for pruning) at most this often
STALE_TEMP_S = 3600.0  # a temp file this old was left by a killed writer
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    """What a cached program holds: the cubin, its kernels' lowered names, each kernel's
    resources as the compiler reported them, the compiler's log and the PTX (the guards read it)."""

    cubin: bytes
    lowered: tuple[tuple[str, str], ...]
    kernel_resources: tuple[tuple[str, Resources], ...]
    log: str
    ptx: str = ""


@dataclass
class DiskCache:
    root: Path
    max_bytes: int
    stores: int = 0  # by this process
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)  # guards `stores`
    pruning: threading.Lock = dataclasses.field(default_factory=threading.Lock)  # one prune at a time


_WARNED: set[str] = set()  # the kinds of problem logged so far by this process (forget_warnings)


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/fsr/compile, else ~/.cache/fsr/compile."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "fsr" / "compile"


def open_cache(setting: str | os.PathLike[str] | None, max_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> DiskCache | None:
    """The disk cache `setting` names: `eval.compile_cache_dir` ("" = `default_cache_dir()`, "off"
    or None = no disk cache) or a path; None when there is none or the folder cannot be used
    (logged once)."""
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
    return DiskCache(root, max_bytes)


def forget_warnings() -> None:
    """Log each kind of problem again the next time it happens (for tests)."""
    _WARNED.clear()


def _entry_path(root: Path, key: str) -> Path:
    return root / key[:2] / f"{key}.json"  # 256 subfolders keep each folder small


def load(disk: DiskCache, key: str, kernels: tuple[str, ...]) -> Entry | None:
    """The entry stored under `key` (the key holds the options; `kernels` checks the entry's
    shape), or None; a damaged entry is removed."""
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
        fields = json.loads(data)
        if fields["format"] != CACHE_FORMAT or fields["key"] != key:
            raise ValueError("an entry of another format or key")
        lowered = tuple((str(k), str(sym)) for k, sym in fields["lowered"])
        mine = tuple((str(k), Resources(**{f: int(v) for f, v in r.items()})) for k, r in fields["kernel_resources"])
        if tuple(k for k, _ in lowered) != kernels or tuple(k for k, _ in mine) != kernels:
            raise ValueError("kernel names differ")
        entry = Entry(base64.b64decode(fields["cubin"], validate=True), lowered, mine, str(fields["log"]),
                      _text(fields["ptx"]))
    except Exception as e:  # whatever damage raises while this is read, the answer is to compile
        _warn_once("corrupt", f"compile cache entry {path} is damaged ({e}); compiling it again", logging.DEBUG)
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    if time.time() - mtime > TOUCH_AFTER_S:
        with contextlib.suppress(OSError):  # a read-only cache still serves hits
            os.utime(path)
    return entry


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("a text field that is not a string")
    return value


def store(disk: DiskCache, key: str, entry: Entry) -> None:
    """Write `entry` under `key` (never raises: a failed write is logged once)."""
    fields = {"format": CACHE_FORMAT, "key": key, "lowered": [list(pair) for pair in entry.lowered],
              "kernel_resources": [[k, dataclasses.asdict(r)] for k, r in entry.kernel_resources],
              "log": entry.log, "cubin": base64.b64encode(entry.cubin).decode("ascii"), "ptx": entry.ptx}
    path = _entry_path(disk.root, key)
    temp = None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)  # mode 0o600
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(fields, separators=(",", ":")).encode())
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


def _prune(disk: DiskCache) -> None:
    """Remove the least recently used entries (oldest mtime first) while the directory holds more
    than its limit, down to PRUNE_TO of it; and temp files that killed writers left."""
    if not disk.pruning.acquire(blocking=False):
        return
    try:
        found: list[lru_folder.Entry] = []
        now = time.time()
        with os.scandir(disk.root) as folders:
            for folder in folders:
                if len(folder.name) == 2 and folder.is_dir(follow_symlinks=False):
                    found += lru_folder.entries(folder.path, ".json", STALE_TEMP_S, now)
        lru_folder.remove_oldest(found, disk.max_bytes, PRUNE_TO)
    except OSError as e:
        _warn_once("prune", f"compile cache {disk.root} cannot be pruned ({e})")
    finally:
        disk.pruning.release()


def _warn_once(kind: str, message: str, level: int = logging.WARNING) -> None:
    """Log a cache problem the first time one of its kind happens in this process."""
    if kind not in _WARNED:
        _WARNED.add(kind)
        _log.log(level, message)
