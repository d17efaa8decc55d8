"""The disk cache of compiled programs: NVRTC runs once per program per node, and no problem with
the cache folder ever fails a compile (real NVRTC, no GPU)."""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fsr import candidate, config, tasks
from fsr.config import EvalConfig
from fsr.evaluate import compile as nvcompile
from fsr.evaluate import compile_cache as cache
from fsr.types import WorkerSpec

SOFTMAX = tasks.load("softmax")
BASE = candidate.parse(SOFTMAX.baseline_source, SOFTMAX)
ARCH = "sm_90"


@dataclasses.dataclass(frozen=True)
class Stored:
    """BASE compiled once, and its cache entry (relative path and bytes) to copy into a test's folder."""

    compiled: nvcompile.Compiled
    relative: Path
    data: bytes


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Stored:
    root = tmp_path_factory.mktemp("stored")
    compiled = nvcompile.CompileService(cache.open_cache(str(root))).compile(BASE, ARCH)
    [path] = entries(root)
    return Stored(compiled, path.relative_to(root), path.read_bytes())


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A fresh disk cache's folder, no problem logged yet."""
    cache.forget_warnings()
    return tmp_path / "cache"


@pytest.fixture
def compiler(root: Path) -> nvcompile.CompileService:
    """Compiles in this process with the disk cache in `root` and an empty in-memory cache."""
    disk = cache.open_cache(str(root))
    assert disk is not None and disk.root == root
    return nvcompile.CompileService(disk)


def entries(root: Path) -> list[Path]:
    return sorted(root.glob("??/*.json"))


def seed(root: Path, stored: Stored, data: bytes | None = None) -> Path:
    path = root / stored.relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(stored.data if data is None else data)
    return path


def forget(compiler: nvcompile.CompileService) -> None:
    """What a second process starts with: nothing in memory."""
    compiler.memory.clear()


def forbid_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("NVRTC was called")
    monkeypatch.setattr(nvcompile, "nvrtc", refuse)


def count_nvrtc(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = nvcompile.nvrtc

    def counted(source: str, kernels: tuple[str, ...], options: tuple[str, ...]) -> nvcompile.Compiled:
        calls.append(source)
        return real(source, kernels, options)
    monkeypatch.setattr(nvcompile, "nvrtc", counted)
    return calls


def same_program(a: nvcompile.Compiled, b: nvcompile.Compiled) -> bool:
    """Everything but the log (which holds ptxas's own time) and the seconds; the PTX too, which
    the guards read (a hit without it would pass every PTX rule)."""
    return (a.cubin, a.lowered, a.resources, a.kernel_resources, a.options, a.ptx) == \
        (b.cubin, b.lowered, b.resources, b.kernel_resources, b.options, b.ptx) and ".entry" in a.ptx


def test_a_compile_stores_one_json_entry_in_a_two_character_subfolder(root, compiler):
    compiled = compiler.compile(BASE, ARCH)
    [path] = entries(root)
    assert path.parent.name == path.stem[:2] and len(path.stem) == 64
    entry = json.loads(path.read_bytes())
    assert entry["format"] == cache.CACHE_FORMAT and entry["key"] == path.stem
    assert entry["lowered"] == [list(pair) for pair in compiled.lowered]
    assert not list(root.rglob("*.tmp"))
    assert (root.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777, path.stat().st_mode & 0o777) == \
        (0o700, 0o700, 0o600)


def test_a_second_compile_is_served_from_disk_without_nvrtc(root, monkeypatch, compiler):
    first = compiler.compile(BASE, ARCH)
    forget(compiler)
    forbid_nvrtc(monkeypatch)
    second = compiler.compile(BASE, ARCH)
    assert second is not first and same_program(second, first) and second.log == first.log
    assert second.resources.registers > 0
    assert second.seconds < first.seconds / 5  # the lookup's time, not the original compile's


def test_another_process_is_served_from_disk(root, stored, monkeypatch, compiler):
    """The key is the same in every process (no per-process hashing or ordering in it)."""
    code = ("import sys; from fsr import candidate, tasks; from fsr.evaluate import compile as c; "
            "from fsr.evaluate import compile_cache; t = tasks.load('softmax'); "
            "c.CompileService(compile_cache.open_cache(sys.argv[1])).compile(candidate.parse(t.baseline_source, t), 'sm_90')")
    subprocess.run([sys.executable, "-c", code, str(root)], check=True, timeout=300)
    assert [p.relative_to(root) for p in entries(root)] == [stored.relative]
    forbid_nvrtc(monkeypatch)
    assert same_program(compiler.compile(BASE, ARCH), stored.compiled)


def test_a_hit_from_a_read_only_cache_needs_no_write(root, stored, monkeypatch, compiler):
    seed(root, stored)
    monkeypatch.setattr(cache.tempfile, "mkstemp", lambda **kw: pytest.fail("wrote on a hit"))
    forbid_nvrtc(monkeypatch)
    assert same_program(compiler.compile(BASE, ARCH), stored.compiled)


def _nvrtc_99(monkeypatch: pytest.MonkeyPatch) -> None:
    from cupy_backends.cuda.libs import nvrtc

    monkeypatch.setattr(nvrtc, "getVersion", lambda: (99, 0))
    nvcompile.toolchain_id.cache_clear()


@pytest.mark.parametrize("change", ["source", "option", "arch", "nvrtc version", "format"])
def test_a_change_to_anything_in_the_key_misses(root, stored, monkeypatch, request, change, compiler):
    seed(root, stored)
    request.addfinalizer(nvcompile.toolchain_id.cache_clear)  # computed again without the patches
    cand, arch = BASE, ARCH
    if change == "source":
        cand = dataclasses.replace(BASE, source=BASE.source + "\n// another program\n")
    elif change == "option":
        cand = dataclasses.replace(BASE, compile_options=("--use_fast_math",))
    elif change == "arch":
        arch = "sm_80"
    elif change == "nvrtc version":
        _nvrtc_99(monkeypatch)
    else:
        monkeypatch.setattr(cache, "CACHE_FORMAT", cache.CACHE_FORMAT + 1)
    calls = count_nvrtc(monkeypatch)
    compiler.compile(cand, arch)
    assert len(calls) == 1 and len(entries(root)) == 2


def _damaged(data: bytes, how: str) -> bytes:
    entry = json.loads(data)
    if how == "truncated":
        return data[: len(data) // 2]
    if how == "empty":
        return b""
    if how == "not json":
        return b"\xff\x00\x13 not json"
    if how == "another format":
        entry["format"] = 0
    elif how == "another key":
        entry["key"] = "0" * 64
    elif how == "cubin not base64":
        entry["cubin"] = "%%%"
    elif how == "a field missing":
        del entry["lowered"]
    elif how == "a field of the wrong type":
        entry["kernel_resources"] = [["softmax_baseline", ["registers", 31]]]
    elif how == "ptx missing":
        del entry["ptx"]
    elif how == "ptx not text":
        entry["ptx"] = None
    return json.dumps(entry).encode()


@pytest.mark.parametrize("how", ["truncated", "empty", "not json", "another format", "another key",
                                 "cubin not base64", "a field missing", "a field of the wrong type",
                                 "ptx missing", "ptx not text"])
def test_a_damaged_entry_is_compiled_again_and_repaired(root, stored, monkeypatch, how, compiler):
    path = seed(root, stored, _damaged(stored.data, how))
    calls = count_nvrtc(monkeypatch)
    assert same_program(compiler.compile(BASE, ARCH), stored.compiled)
    assert len(calls) == 1
    assert json.loads(path.read_bytes())["format"] == cache.CACHE_FORMAT
    forget(compiler)
    forbid_nvrtc(monkeypatch)
    assert same_program(compiler.compile(BASE, ARCH), stored.compiled)


def test_off_writes_nothing_and_the_default_folder_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.open_cache("off") is None
    compiler = nvcompile.CompileService(cache.open_cache("off"))
    calls = count_nvrtc(monkeypatch)
    compiler.compile(BASE, ARCH)
    forget(compiler)
    compiler.compile(BASE, ARCH)
    assert len(calls) == 2 and not list(tmp_path.iterdir())
    default = cache.open_cache("")
    assert default is not None and default.root == tmp_path / "xdg" / "fsr" / "compile"  # where "" would have written


class _FullDisk:
    """A file whose writes fail as on a full disk."""

    def __init__(self, f):
        self.f = f

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("problem", ["a file where the folder should be", "read-only", "disk full"])
def test_an_unusable_cache_still_compiles_and_is_logged_once(root, monkeypatch, caplog, problem, compiler):
    if problem == "a file where the folder should be":
        (root.parent / "file").write_text("")
        compiler = nvcompile.CompileService(cache.open_cache(str(root.parent / "file")))
        assert compiler.disk is None
    elif problem == "read-only":
        def read_only(**kw):
            raise OSError(errno.EROFS, "Read-only file system")
        monkeypatch.setattr(cache.tempfile, "mkstemp", read_only)
    else:
        real = os.fdopen
        monkeypatch.setattr(os, "fdopen", lambda fd, *a, **kw: _FullDisk(real(fd, *a, **kw)))
    calls = count_nvrtc(monkeypatch)
    with caplog.at_level(logging.DEBUG, logger=cache.__name__):
        first = compiler.compile(BASE, ARCH)
        forget(compiler)
        second = compiler.compile(BASE, ARCH)
    assert first.cubin and same_program(first, second) and len(calls) == 2
    assert len(caplog.records) == 1 and caplog.records[0].levelno == logging.WARNING
    assert not entries(root) and not list(root.parent.rglob("*.tmp"))


def test_pruning_keeps_the_cache_under_its_limit_removing_the_oldest_first(root, stored):
    now = time.time()
    fakes = []
    for i in range(10):
        path = root / f"{i:02x}" / f"{i:02x}{'0' * 62}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 10_000)
        os.utime(path, (now - 1000 + i, now - 1000 + i))  # fakes[0] the least recently used
        fakes.append(path)
    stale, fresh = root / "00" / ".old.tmp", root / "00" / ".new.tmp"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"x")
    os.utime(stale, (now - 2 * cache.STALE_TEMP_S,) * 2)
    limit = len(stored.data) + 50_000  # about half the fakes go (the real entry is the newest)
    compiler = nvcompile.CompileService(cache.open_cache(str(root), limit))
    compiler.compile(BASE, ARCH)  # the process's first store checks the size
    kept = [p.exists() for p in fakes]
    assert (root / stored.relative).exists()
    assert sum(p.stat().st_size for p in entries(root)) <= limit
    assert 0 < kept.count(True) < len(fakes) and kept == sorted(kept)  # only the oldest went
    assert not stale.exists() and fresh.exists()


def test_pruning_is_rare(root, monkeypatch, compiler):
    scans = []
    monkeypatch.setattr(cache, "_prune", scans.append)
    for i in range(3):
        compiler.compile(dataclasses.replace(BASE, source=BASE.source + f"\n// variant {i}\n"), ARCH)
    assert len(entries(root)) == 3 and len(scans) == 1


def test_a_hit_refreshes_an_old_entry_age_and_leaves_a_recent_one(root, stored, monkeypatch, compiler):
    path = seed(root, stored)
    forbid_nvrtc(monkeypatch)
    for age, refreshed in ((2 * cache.TOUCH_AFTER_S, True), (10.0, False)):
        old = time.time() - age
        os.utime(path, (old, old))
        forget(compiler)
        compiler.compile(BASE, ARCH)
        assert (path.stat().st_mtime > old + 1) == refreshed


def test_concurrent_stores_of_one_entry_leave_one_whole_entry(root, stored):
    """Writers replace the entry atomically: a reader never sees a part of one."""
    disk = cache.open_cache(str(root))
    assert disk is not None
    key = stored.relative.stem
    kernels = tuple(k for k, _ in stored.compiled.lowered)
    c = stored.compiled
    entry = cache.Entry(c.cubin, c.lowered, c.kernel_resources, c.log, c.ptx)
    cache.store(disk, key, entry)
    misses = []

    def write():
        for _ in range(20):
            cache.store(disk, key, entry)

    def read():
        for _ in range(100):
            if cache.load(disk, key, kernels) != entry:
                misses.append(1)

    threads = [threading.Thread(target=write) for _ in range(4)] + [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not misses and entries(root) == [root / stored.relative] and not list(root.rglob("*.tmp"))


def test_the_evaluator_uses_the_configured_folder(tmp_path, stored, monkeypatch):
    from fsr.evaluate.evaluator import GpuEvaluator

    folder = tmp_path / "configured"
    seed(folder, stored)
    evaluator = GpuEvaluator(WorkerSpec((), EvalConfig(compile_cache_dir=str(folder))))
    evaluator.compiler.pool = None  # nothing compiles: a miss would call NVRTC here, which is forbidden
    forbid_nvrtc(monkeypatch)
    assert same_program(evaluator.compiler.compile(BASE, ARCH), stored.compiled)
    evaluator.close()
    evaluator = GpuEvaluator(WorkerSpec((), EvalConfig(compile_cache_dir="off")))
    evaluator.compiler.pool = None
    calls = []
    monkeypatch.setattr(nvcompile, "nvrtc", lambda *args: calls.append(args) or stored.compiled)
    evaluator.compiler.compile(BASE, ARCH)
    evaluator.close()
    assert len(calls) == 1 and evaluator.compiler.disk is None


@pytest.mark.parametrize(("name", "value", "allowed"), [
    ("compile_cache_dir", "relative/folder", "absolute folder"),
    ("compile_cache_dir", "/a\0b", "absolute folder"),
    ("compile_cache_max_bytes", 0, "an integer >= 1"),
])
def test_a_bad_cache_setting_names_the_field(name, value, allowed):
    with pytest.raises(config.ConfigError) as err:
        config.from_dict({"eval": {name: value}})
    assert str(err.value).startswith(f"[eval] {name} = ") and allowed in str(err.value)


@pytest.mark.parametrize("value", ["", "off", "/scratch/fsr-compile", "~/fsr-compile"])
def test_good_cache_folders_load(value):
    assert config.from_dict({"eval": {"compile_cache_dir": value}}).eval.compile_cache_dir == value
