"""Compiles of proposer code in separate processes, each bounded in wall time and memory.

NVRTC runs in the calling process as a library call that cannot be cancelled: a candidate whose
templates explode (a G x G grid of instantiations, a recursive template, a huge unroll) holds a
host thread and takes the memory it likes, and a crash inside NVRTC would take the GPU worker with
it. So a worker compiles through a `CompilePool`: long-lived compile processes (one per host
core the worker owns, started once and reused), each compile with a deadline and a memory
ceiling; a process past either is killed and replaced, and the compile fails with a one-line
reason (`CompileLimit`, a `CompileFailed`: the candidate's verdict is COMPILE_ERROR and the
reason goes back to the proposer like any compiler log; nothing of it is cached).

The processes run `python -m fsr.evaluate.compile_pool` and speak length-prefixed pickles over
their standard input and output; both ends are fsr's own code (the source is data to NVRTC, never
executed). A compile process exits when its parent is gone, so none is left behind when a
worker is killed.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from fsr.evaluate import compile as compiler
from fsr.evaluate import compile_cache
from fsr.evaluate.compile import Compiled, CompileFailed, CompileService
from fsr.types import bytes_text

if TYPE_CHECKING:
    from fsr.config import EvalConfig

WATCH_S = 0.02  # how often a waiting compile checks its process's memory
START_TIMEOUT_S = 60.0  # a compile process that is not ready by then is a fault of the machine
_HEADER = struct.Struct("<Q")


class CompileLimit(CompileFailed):
    """A compile stopped by the pool: past its deadline or memory ceiling, or the compiler died.
    The message is one line, fit for the proposer's feedback."""


class PoolBroken(RuntimeError):
    """A compile process could not be started: the machine's fault, never a candidate's."""


@dataclass(frozen=True)
class Limits:
    """What one compile may take: wall-clock seconds and resident bytes."""

    deadline_s: float
    max_bytes: int


class _Process:
    """One compile process and its pipes."""

    def __init__(self, max_bytes: int) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.popen = subprocess.Popen([sys.executable, "-m", "fsr.evaluate.compile_pool", str(max_bytes)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                      start_new_session=False)
        assert self.popen.stdin is not None and self.popen.stdout is not None
        self.to_child: IO[bytes] = self.popen.stdin
        self.from_child: IO[bytes] = self.popen.stdout
        self.ready = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def rss_bytes(self) -> int:
        """Resident memory now (0 once gone, or where /proc has no such file)."""
        try:
            with open(f"/proc/{self.pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmRSS:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        return 0

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)
        for pipe in (self.to_child, self.from_child):
            with contextlib.suppress(OSError):
                pipe.close()


class CompilePool:
    """Bounded compiles on `processes` reusable compile processes; safe to call from many threads
    (each call takes an idle process, or waits for one)."""

    def __init__(self, processes: int, limits: Limits) -> None:
        if processes < 1:
            raise ValueError("a compile pool needs at least one process")
        self.limits = limits
        self.size = processes
        # last in, first out: a compile takes the process used last, so a pool grows only to the
        # compiles it ran at once (a worker holds two pools: its own and its GPU child's)
        self._idle: queue.LifoQueue[_Process | None] = queue.LifoQueue()
        self._all: set[_Process] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.replaced = 0  # processes killed past a limit or found dead, and started anew
        for _ in range(processes):
            self._idle.put(None)  # started on first use: a pool that is never used costs nothing

    def compile(self, source: str, kernels: tuple[str, ...], options: tuple[str, ...]) -> Compiled:
        """What `fsr.evaluate.compile.nvrtc` returns, compiled in a pool process; raises
        CompileFailed with the compiler's log, or CompileLimit with a one-line reason."""
        proc = self._take()
        keep = False
        try:
            result = self._run(proc, (source, kernels, options))
            keep = True
        finally:
            self._give_back(proc if keep else None, proc)
        kind, payload = result
        if kind == "ok":
            return payload
        if kind == "unavailable":
            raise compiler.CompilerUnavailable(payload)
        raise CompileFailed(payload)

    def start(self, processes: int) -> int:
        """Start up to `processes` compile processes now, without waiting for them: a process takes
        a second or more to start (Python and the compiler's modules), and a worker's first
        candidates would otherwise wait for every one of them at once, on a host busy starting its
        GPU child. Returns how many were started; a process that cannot be started is left to
        the first compile that needs it (which reports why)."""
        taken: list[_Process | None] = []
        while len(taken) < min(processes, self.size):
            try:
                taken.append(self._idle.get_nowait())
            except queue.Empty:
                break
        started = 0
        for i, proc in enumerate(taken):
            if proc is not None or self._closed:
                continue
            try:
                fresh = _Process(self.limits.max_bytes)
            except OSError:
                continue
            with self._lock:
                closed = self._closed
                if not closed:
                    self._all.add(fresh)
            if closed:  # closed meanwhile: `close` did not see this one
                fresh.kill()
                continue
            taken[i] = fresh
            started += 1
        for proc in reversed(taken):  # back in the order taken (last in, first out)
            self._idle.put(proc)
        return started

    def close(self) -> None:
        """Kill every compile process; later calls raise PoolBroken."""
        with self._lock:
            self._closed = True
            procs, self._all = list(self._all), set()
        for p in procs:
            p.kill()

    def pids(self) -> list[int]:
        """The compile processes alive now (for tests and diagnostics)."""
        with self._lock:
            return [p.pid for p in self._all if p.popen.poll() is None]

    # ---- internals ----------------------------------------------------------------------------

    def _take(self) -> _Process:
        proc = self._idle.get()
        if self._closed:
            self._idle.put(proc)
            raise PoolBroken("the compile pool is closed")
        if proc is not None and proc.popen.poll() is None:
            return proc
        try:
            fresh = _Process(self.limits.max_bytes)
        except OSError as e:
            self._idle.put(None)
            raise PoolBroken(f"cannot start a compile process: {e}") from None
        with self._lock:
            if proc is not None:
                self._all.discard(proc)
            self._all.add(fresh)
        return fresh

    def _give_back(self, keep: _Process | None, used: _Process) -> None:
        if keep is None:
            used.kill()
            with self._lock:
                self._all.discard(used)
                self.replaced += 1
        self._idle.put(keep)

    def _run(self, proc: _Process, request: tuple[str, tuple[str, ...], tuple[str, ...]]) -> tuple[str, Any]:
        """Send one request and wait for its answer within the limits."""
        try:
            if not proc.ready:
                _expect(proc, "ready", START_TIMEOUT_S)
                proc.ready = True
            _send(proc.to_child, request)
        except (OSError, EOFError, TimeoutError) as e:
            raise PoolBroken(f"compile process {proc.pid} did not start: {e}") from None
        start = time.monotonic()
        fd = proc.from_child.fileno()
        peak = 0
        while True:
            waited = time.monotonic() - start
            if waited >= self.limits.deadline_s:
                raise CompileLimit(f"compile exceeded {self.limits.deadline_s:g} s")
            if _readable(fd, min(WATCH_S, self.limits.deadline_s - waited)):
                try:
                    return _recv(proc.from_child)
                except (EOFError, OSError, pickle.UnpicklingError):
                    raise self._death(proc, peak) from None
            rss = proc.rss_bytes()
            peak = max(peak, rss)
            if rss > self.limits.max_bytes:
                raise CompileLimit(f"compile exceeded {bytes_text(self.limits.max_bytes)} of memory")
            if proc.popen.poll() is not None:
                raise self._death(proc, peak)

    def _death(self, proc: _Process, peak: int) -> CompileLimit:
        """Why a compile process died mid-compile, as one line."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=5)
        code = proc.popen.returncode
        if peak > 0.8 * self.limits.max_bytes:  # the hard limit in the process struck first
            return CompileLimit(f"compile exceeded {bytes_text(self.limits.max_bytes)} of memory")
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return CompileLimit(f"the compiler crashed: {name}")
        return CompileLimit(f"the compiler crashed: exit status {code}")


def _readable(fd: int, timeout_s: float) -> bool:
    import select

    ready, _, _ = select.select([fd], [], [], max(0.0, timeout_s))
    return bool(ready)


def _send(pipe: IO[bytes], obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_HEADER.pack(len(data)) + data)
    pipe.flush()


def _recv(pipe: IO[bytes]) -> Any:
    head = _read_exact(pipe, _HEADER.size)
    return pickle.loads(_read_exact(pipe, _HEADER.unpack(head)[0]))


def _read_exact(pipe: IO[bytes], n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = pipe.read(left)
        if not chunk:
            raise EOFError("the compile process closed its output")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _expect(proc: _Process, word: str, timeout_s: float) -> None:
    if not _readable(proc.from_child.fileno(), timeout_s):
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    got = _recv(proc.from_child)
    if got != word:
        raise EOFError(f"expected {word!r}, got {got!r}")


# ---- a worker's compile service ---------------------------------------------------------------

def worker_compiler(cfg: EvalConfig, processes: int, deadline_s: float | None = None,
                    start: bool = False) -> CompileService:
    """The compile service of a process that compiles proposer code (the GPU worker, its GPU
    child, `fsr eval`): the node's disk cache (`cfg.compile_cache_dir`, `compile_cache_max_bytes`)
    and misses compiled in `processes` bounded compile processes, each compile within
    `deadline_s` (default `cfg.compile_timeout_s`) and `cfg.compile_max_bytes`; `start`: every
    process started now, on a thread of its own (a campaign's worker, whose first candidates
    compile all at once), else each at the first compile that needs it. Its caller closes it."""
    limits = Limits(cfg.compile_timeout_s if deadline_s is None else deadline_s, cfg.compile_max_bytes)
    disk = compile_cache.open_cache(cfg.compile_cache_dir, cfg.compile_cache_max_bytes)
    pool = CompilePool(processes, limits)
    if start:  # on a thread: the caller goes on (a worker, to start its GPU child) while they are spawned
        threading.Thread(target=pool.start, args=(processes,), daemon=True, name="fsr-compile-start").start()
    return CompileService(disk, pool)


# ---- the compile process ------------------------------------------------------------------------

def _die_with_parent() -> None:
    """Exit as soon as the process that started this one is gone, even mid-compile (NVRTC
    releases the GIL, so this thread runs while it works). PR_SET_PDEATHSIG would fire when the
    starting *thread* exits, which in a thread pool is not the owner's death."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(0)

    threading.Thread(target=watch, name="fsr-compile-parent-watch", daemon=True).start()


def _limit_memory(max_bytes: int) -> None:
    """A hard ceiling behind the parent's watch: the parent polls resident memory, which a fast
    allocation can overshoot between two looks; the data limit stops the process itself at twice
    the ceiling (the parent reports either as the same one-line reason)."""
    import resource

    limit = 2 * max_bytes
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def serve(max_bytes: int, stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The compile process's loop: one request at a time until its input closes."""
    from fsr.evaluate.compile import CompilerUnavailable, nvrtc, nvrtc_version

    _die_with_parent()
    _limit_memory(max_bytes)
    with contextlib.suppress(CompilerUnavailable):  # NVRTC loaded before the first request (a process
        nvrtc_version()  # started ahead has the time); a failure is the first compile's to report
    _send(stdout, "ready")
    while True:
        try:
            source, kernels, options = _recv(stdin)
        except EOFError:
            return
        try:
            reply: tuple[str, Any] = ("ok", nvrtc(source, kernels, options))
        except CompilerUnavailable as e:  # the machine's fault: the parent raises it, no verdict
            reply = ("unavailable", str(e))
        except CompileFailed as e:
            reply = ("failed", e.log)
        except MemoryError:
            reply = ("failed", f"compile exceeded {bytes_text(max_bytes)} of memory")
        _send(stdout, reply)


def main() -> None:
    # The protocol keeps the real standard output; anything else that prints (a library's
    # diagnostics) goes to standard error instead of corrupting it.
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(int(sys.argv[1]), sys.stdin.buffer, protocol)


if __name__ == "__main__":
    main()
