"""The parent's side of the child process: start it, send it work with a deadline, replace it
when a kernel kills it or hangs. The parent itself never touches CUDA, so it never dies with a
bad kernel.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
import time
import types
from collections.abc import Iterator
from typing import Any

from fsr.evaluate import START_TIMEOUT_S
from fsr.evaluate.wire import Compared, Died, Faulted, TimedOut
from fsr.types import DeviceInfo, WorkerSpec

# The thread-count variables of the BLAS and OpenMP runtimes NumPy may be built on. Ray sets
# OMP_NUM_THREADS=1 in actors without CPUs, which would leave the child's float64 references
# (a 4096^3 matrix product for sgemm) on one core.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


class NoDevice(RuntimeError):
    """The child could not start a CUDA device (no GPU, no driver)."""


class Sandbox:
    """One long-lived child process holding a CUDA context."""

    def __init__(self, spec: WorkerSpec):
        """`spec` goes to every child whole; `spec.host_threads`: threads the child's numerical
        libraries may use (0: as inherited)."""
        self.spec = spec
        self.device: DeviceInfo | None = None
        self.process: Any = None
        self.conn: Any = None
        self.restarts = 0
        self.compared: list[Compared] = []  # comparators timed beside candidates, not yet taken

    def ensure_started(self) -> DeviceInfo:
        """Start the child if none is running; returns the device it holds."""
        if self.process is not None and self.process.is_alive():
            assert self.device is not None
            return self.device
        ctx = mp.get_context("spawn")  # fork after CUDA or Ray threads is unsafe
        parent, child = ctx.Pipe()
        self.process = ctx.Process(target=_child_main, name="fsr-gpu-child", daemon=True,
                                   args=(child, self.spec, self.device))
        with _thread_env(self.spec.host_threads or None), _main_unseen():  # BLAS threads read as NumPy loads
            self.process.start()
        child.close()
        self.conn = parent
        if not parent.poll(START_TIMEOUT_S):
            self.kill()
            raise NoDevice(f"the GPU child did not start within {START_TIMEOUT_S:.0f} s")
        try:
            kind, payload = parent.recv()
        except EOFError:
            self.kill()
            raise NoDevice("the GPU child exited while starting") from None
        if kind != "ready":
            self.kill()
            raise NoDevice(payload)
        self.device = payload
        return payload

    def call(self, kind: str, payload: Any, timeout_s: float) -> Any:
        """Send one request; the reply, or Died / Faulted / TimedOut (after which the child is
        gone): Died when the child died or a kernel broke its context, Faulted when fsr's own code
        failed there. The
        child may send notes of what it is running before its reply (("note", text), or ("note",
        (text, seconds)): that part may run `seconds` at most, within `timeout_s`); a death or a
        timeout names the last one. Comparator figures that finished meanwhile (("compared",
        records)) are kept in `compared`."""
        self.ensure_started()
        started = time.monotonic()
        deadline = started + timeout_s
        doing = ""
        try:
            self.conn.send((kind, payload))
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not self.conn.poll(left):
                    self.kill()
                    return TimedOut(time.monotonic() - started, doing)
                status, reply = self.conn.recv()
                if status == "compared":
                    self.compared.extend(reply)
                    continue
                if status != "note":
                    break
                doing, limit = (reply, None) if isinstance(reply, str) else reply
                deadline = started + timeout_s if limit is None else min(started + timeout_s, time.monotonic() + limit)
        except (EOFError, OSError, BrokenPipeError):
            code = self._reap()
            return Died(_during(f"the GPU child died (exit code {code})", doing))
        if status in ("crash", "fault"):
            self._reap()
            return (Died if status == "crash" else Faulted)(_during(reply, doing))
        return reply

    def kill(self) -> None:
        """Kill the child now (a hung kernel cannot be interrupted any other way)."""
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        self._reap()

    def _reap(self) -> int | None:
        code = None
        if self.process is not None:
            self.process.join(timeout=30)
            code = self.process.exitcode
            self.restarts += 1
        if self.conn is not None:
            self.conn.close()
        self.process, self.conn = None, None
        return code

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        if self.process is not None:
            self.process.join(timeout=5)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout=5)
        self.process, self.conn = None, None


def _during(reason: str, doing: str) -> str:
    return f"{reason} (during {doing})" if doing else reason


@contextlib.contextmanager
def _thread_env(threads: int | None) -> Iterator[None]:
    """The BLAS/OpenMP thread variables set to `threads` while a child is spawned (a spawned
    process inherits the environment of the moment), then restored."""
    if threads is None:
        yield
        return
    saved = {k: os.environ.get(k) for k in THREAD_VARIABLES}
    os.environ.update(dict.fromkeys(THREAD_VARIABLES, str(max(1, threads))))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _main_unseen() -> Iterator[None]:
    """A spawned child started meanwhile does not run this process's main script again. Spawning
    runs the parent's `__main__` file in the child (as `__mp_main__`, for objects defined there);
    the GPU child needs nothing from it, and in a Ray worker that file is Ray's worker script: a
    second or so of imports (Ray's) before every GPU child's start, a restart's included. A bare
    module stands in for `__main__` while the child is spawned (the spawn reads it then)."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main
        else:
            sys.modules.pop("__main__", None)


def _child_main(*args: Any) -> None:
    """The GPU child's entry point, imported there: this process never loads CUDA's modules."""
    from fsr.evaluate.gpu.child import main

    main(*args)
