"""The disk cache of tasks' screening contents: a benchmark input set at the benchmark size with
its expected outputs (the float64 reference, rounded for the checks, and each element's bound),
shared by every GPU child of a node (`eval.contents_cache_dir`). Building a set is the largest
host cost of a worker's start (float64 references of 8192^3 products, 4096-token attention);
with the cache, the first child to need a set builds it and every other child of the node, and
every later campaign on the same task, reads it instead.

Only screening's sets are cached: they are drawn from `eval.seed` and the task's content hash, so
every worker holds the same ones anyway (docs/judge.md, "Two tiers"). Certification's sets come
from the operating system's entropy and never touch a disk.

One `.npz` file per set (never pickle: a cache folder is only data), named by a key of everything
that decides its bytes: the task's content hash, the set's seed, the size, the output dtypes and
tolerance, and the source of the code that draws and rounds (so a change to it is a miss, not a
stale set). It is written to a temp file beside it and renamed into place. A child that finds no
file takes the set's lock file (flock: released by the kernel if its holder dies) and builds it
while others needing the same set wait on the lock and then read it, so N workers of a node build
a task once, not N times. Least recently used files are pruned past a byte limit. Problems with the
folder never fail a preparation: they are logged once per process and the set is built as without
the cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fsr.evaluate import lru_folder
from fsr.evaluate.gpu.verify import Expected

CACHE_FORMAT = 2  # part of every key: bump it when a file's arrays or their meaning change
TOUCH_AFTER_S = 600.0  # a hit refreshes its file's mtime (its age for pruning) at most this often
PRUNE_TO = 0.8  # a prune removes files until the folder is this fraction of its limit
STALE_TEMP_S = 3600.0  # a temp file this old was left by a killed writer
Content = tuple[dict[str, np.ndarray], dict[str, Expected]]  # as fsr.evaluate.gpu.inputs.Content
_log = logging.getLogger(__name__)
_WARNED: set[str] = set()


@dataclass
class ContentsCache:
    root: Path
    max_bytes: int
    lock: threading.Lock = field(default_factory=threading.Lock)  # one prune at a time in this process
    hits: int = 0
    builds: int = 0


def default_dir() -> Path:
    """$XDG_CACHE_HOME/fsr/contents, else ~/.cache/fsr/contents."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "fsr" / "contents"


def open_cache(setting: str | None, max_bytes: int) -> ContentsCache | None:
    """The cache `setting` names: `eval.contents_cache_dir` ("" = `default_dir()`, "off" or None =
    none) or a path; None when there is none or the folder cannot be used (logged once)."""
    if setting is None or setting == "off" or max_bytes <= 0:
        return None
    root = None
    try:
        root = Path(setting).expanduser() if setting else default_dir()
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if root.stat().st_uid != os.getuid():  # another user's references would judge this user's kernels
            _warn_once("owner", f"contents cache {root} belongs to another user; building without it")
            return None
    except (OSError, RuntimeError, ValueError) as e:  # RuntimeError: no home folder for ~
        _warn_once("folder", f"contents cache {root or setting or default_dir()} cannot be used ({e}); "
                             "building without it")
        return None
    return ContentsCache(root, max_bytes)


def key(parts: tuple[Any, ...]) -> str:
    """The key of a set: `parts` (what decides its bytes, as the caller lists them), this format
    and the source of the code that draws inputs and rounds references."""
    return hashlib.sha256(repr((CACHE_FORMAT, _code_id(), parts)).encode()).hexdigest()


def get(cache: ContentsCache | None, name: str, build: Callable[[], Content]) -> Content:
    """The set stored under `name` (a `key`), else `build()`'s, stored for the next reader; without
    a cache, `build()`'s. Readers of a set being built wait for its builder."""
    if cache is None:
        return build()
    path = file_of(cache, name)
    found = _load(cache, path)
    if found is not None:
        return found
    try:
        lock = os.open(cache.root / f"{name}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as e:
        _warn_once("lock", f"contents cache {cache.root} cannot be written ({e}); building without it")
        return build()
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process (or thread) building it: wait for it
        found = _load(cache, path)
        if found is not None:
            return found
        content = build()
        cache.builds += 1
        _store(cache, path, content)
        return content
    finally:
        os.close(lock)  # releases the flock


def file_of(cache: ContentsCache, name: str) -> Path:
    """The file that holds the set stored under `name` (a `key`), once it is built."""
    return cache.root / f"{name}.npz"


def _load(cache: ContentsCache, path: Path) -> Content | None:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        return None
    except Exception as e:  # damaged or half-gone: built again (and stored over it)
        _warn_once("corrupt", f"contents cache file {path} is damaged ({e}); building it again", logging.DEBUG)
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    for k in [k for k in arrays if k.startswith("dtype.")]:  # NumPy saves ml_dtypes' floats as raw bytes
        name, kind = k[6:], str(arrays.pop(k))
        if arrays[name].dtype != np.dtype(kind):
            arrays[name] = arrays[name].view(np.dtype(kind))
    inputs = {k[3:]: v for k, v in arrays.items() if k.startswith("in.")}
    expected = {k[6:]: Expected(v, arrays["bound." + k[6:]]) for k, v in arrays.items() if k.startswith("value.")}
    if time.time() - mtime > TOUCH_AFTER_S:
        with contextlib.suppress(OSError):
            os.utime(path)
    cache.hits += 1
    return inputs, expected


def _store(cache: ContentsCache, path: Path, content: Content) -> None:
    """Write a set (never raises: a failed write is logged once), then prune past the limit."""
    inputs, expected = content
    arrays = {f"in.{k}": v for k, v in inputs.items()}
    for k, e in expected.items():
        arrays[f"value.{k}"], arrays[f"bound.{k}"] = e.value, e.bound
    arrays |= {f"dtype.{k}": np.array(v.dtype.name) for k, v in arrays.items()}  # bfloat16, float8 by name
    temp = None
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.stem[:16]}.", suffix=".tmp", dir=cache.root)
        with os.fdopen(fd, "wb") as f:
            savez: Any = np.savez  # its stubs type every keyword as its allow_pickle flag
            savez(f, **arrays)
        os.replace(temp, path)
    except OSError as e:  # disk full, read-only: the set stands without its file
        _warn_once("write", f"contents cache {cache.root} cannot be written ({e}); building without storing")
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        return
    _prune(cache)


def _prune(cache: ContentsCache) -> None:
    """Remove the least recently used sets while the folder holds more than its limit, down to
    PRUNE_TO of it, and temp files that killed writers left."""
    if not cache.lock.acquire(blocking=False):
        return
    try:
        found = lru_folder.entries(str(cache.root), ".npz", STALE_TEMP_S, time.time())
        lru_folder.remove_oldest(found, cache.max_bytes, PRUNE_TO)
    except OSError as e:
        _warn_once("prune", f"contents cache {cache.root} cannot be pruned ({e})")
    finally:
        cache.lock.release()


@functools.cache
def _code_id() -> str:
    """A digest of the modules that draw and round a set (inputs, the references' rounding and
    bounds): a change to them changes every key."""
    from fsr import dtypes, tasks
    from fsr.evaluate.gpu import inputs, verify

    digest = hashlib.sha256()
    for module in (dtypes, tasks, inputs, verify):
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()


def forget_warnings() -> None:
    """Log each kind of problem again the next time it happens (for tests)."""
    _WARNED.clear()


def _warn_once(kind: str, message: str, level: int = logging.WARNING) -> None:
    if kind not in _WARNED:
        _WARNED.add(kind)
        _log.log(level, message)
