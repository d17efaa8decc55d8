"""The comparators a GPU child times for each task, with fsr's own timing protocol on fsr's stream:
the library (CuPy/cuBLAS), PyTorch eager and torch.compile. A comparator that is missing or
fails is logged and left out (None), never a verdict.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import cupy as cp
import numpy as np

from fsr import tasks
from fsr.config import EvalConfig
from fsr.evaluate.gpu import evict, timing
from fsr.evaluate.gpu.inputs import TaskState
from fsr.evaluate.gpu.programs import ContextLost, synchronize

log = logging.getLogger(__name__)

# One call of a task's PyTorch comparator: (inputs, sizes, torch stream or None for its own).
TorchRun = Callable[..., None]


class Comparators:
    """Times a prepared task's comparators on `stream`, each like a candidate (L2 flushed, held
    chunks, the sampling budget of `cfg`)."""

    def __init__(self, cfg: EvalConfig, stream: cp.cuda.Stream, flusher: timing.L2Flusher, hold: timing.Hold):
        self.cfg, self.stream, self.flusher, self.hold = cfg, stream, flusher, hold
        self.missed: list[str] = []  # why comparators were left out, one line each, until taken

    def library_us(self, state: TaskState) -> float | None:
        """The task's `library` function's median on fsr's stream: CuPy's current stream, and
        PyTorch's too where the function calls into torch (a bfloat16 library is torch's; on
        torch's own stream its work ran outside the timed events, and 8192^3 read 2 us). None,
        logged with why, where the function raises: a library that refuses the benchmark size
        (cuDNN's attention pinned, reference.py's library()) has no figure, rather than another
        backend's under its name."""
        fn = tasks.functions(state.task).library
        torch_stream = _torch_stream(self.stream, state)

        def call(inputs: dict[str, cp.ndarray], size: dict[str, int]) -> None:
            with self.stream, torch_stream():
                fn(inputs, size)

        try:
            return self._median_us(state, call)
        except ContextLost:
            raise
        except Exception as e:
            named = f"library ({state.task.library})" if state.task.library else "library"
            self._missing(state, named, e, self.stream)
            return None

    def pytorch_us(self, state: TaskState, mode: str | None) -> tuple[float | None, float | None]:
        """PyTorch's median, timed like the library (on fsr's stream as torch's current stream,
        TF32 off), eager (`mode` None) or under torch.compile in that mode, and the seconds the
        first calls took to compile it (None for eager): a task with `torch_module` times the
        model's forward alone, its arguments made ahead. (None, ...), logged once per task, when
        the task has no `torch_eager`, torch cannot be imported, or the function does not compile
        or raises: a missing comparator is no verdict."""
        run, compile_s = self.torch_run(state, mode, self.stream)
        return (self.torch_median_us(state, run, mode) if run is not None else None), compile_s

    def torch_run(self, state: TaskState, mode: str | None, stream: cp.cuda.Stream) -> tuple[TorchRun | None, float | None]:
        """The task's PyTorch call, made on `stream` and, under torch.compile (`mode` set),
        compiled there by calling it once per benchmark set; and the seconds compiling took.
        (None, ...) as `pytorch_us` says. The GPU work of compiling (Inductor's autotuning, the
        first calls) runs on `stream`: a stream of its own keeps it out of fsr's timed queue."""
        functions = tasks.functions(state.task)
        if getattr(functions, "torch_eager", None) is None:
            return None, None
        size, views = dict(state.task.bench_size), _views(state)
        started = time.perf_counter()
        try:
            import torch

            from fsr.torch_lock import torch_lock

            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            with torch_lock():  # an imported task's reference may set torch's default dtype in another thread
                run = _torch_call(functions, views, size, mode, stream.ptr)
                if mode is None:
                    return run, None
                for v in views:  # compiles (and, for a guard that differs per set, recompiles) now
                    run(v, size)
                synchronize(stream)
            return run, time.perf_counter() - started
        except ContextLost:
            raise
        except Exception as e:  # ImportError, the op does not compile, or the task's function failed
            self._missing(state, _torch_name(mode), e, stream)
            return None, None

    def torch_median_us(self, state: TaskState, run: TorchRun, mode: str | None) -> float | None:
        """`run`'s median on fsr's stream (None, logged, if it raises)."""
        try:
            import torch

            from fsr.torch_lock import torch_lock

            on = torch.cuda.ExternalStream(self.stream.ptr)
            with torch_lock():
                return self._median_us(state, lambda inputs, at: run(inputs, at, on))
        except ContextLost:
            raise
        except Exception as e:
            self._missing(state, _torch_name(mode), e, self.stream)
            return None

    def _missing(self, state: TaskState, what: str, e: Exception, stream: cp.cuda.Stream) -> None:
        """Log and keep (`missed`) why the comparator `what` has no figure; `stream` waited for."""
        first = str(e).splitlines()[0][:300] if str(e) else ""
        log.warning("task %s: %s not timed (%s: %s)", state.task.name, what, type(e).__name__, first)
        self.missed.append(f"{what} not timed ({type(e).__name__}: {first})")
        synchronize(stream)

    def _median_us(self, state: TaskState, call: Any) -> float:
        """Median of `call(inputs, size)` over the benchmark input sets, fsr's timing protocol.
        Each set is called once first, unheld: a comparator's setup cached per set (a sparse
        matrix made canonical) waits on the host and would expire a held run, leaving every
        sample unheld with the library's host time in it."""
        size, views = dict(state.task.bench_size), _views(state)
        for view in views:
            call(view, size)
        synchronize(self.stream)

        def run(i: int) -> None:
            call(views[i % len(views)], size)

        flusher: timing.Flush = self.flusher
        if self.cfg.comparator_flush == "certification":  # the inputs' hinted lines set back first
            flusher = evict.EvictingFlush(self.flusher, input_regions(views))
        samples = timing.sample(run, self.stream, flusher, budget_s=self.cfg.bench_budget_s,
                                min_samples=self.cfg.bench_min_samples, max_samples=self.cfg.bench_max_samples,
                               warmup_s=self.cfg.warmup_s, hold=self.hold, rel_error=self.cfg.bench_rel_error)
        return float(np.median(samples))


def _torch_name(mode: str | None) -> str:
    """PyTorch's comparator as the log names it: eager (`mode` None) or torch.compile in `mode`."""
    return "PyTorch eager" if mode is None else f"torch.compile ({mode})"


def _torch_call(functions: Any, views: list[dict[str, cp.ndarray]], size: dict[str, int], mode: str | None,
                stream_ptr: int) -> TorchRun:
    """A call of the PyTorch comparator on the stream at `stream_ptr` (or the torch stream a call
    names), eager (`mode` None) or compiled in that torch.compile mode: the task's `torch_module`
    model with each input set's arguments made ahead (so a call is the model's forward only),
    else `torch_eager` whole. Compiling happens at the first call."""
    import torch

    torch_stream = torch.cuda.ExternalStream(stream_ptr)
    module = getattr(functions, "torch_module", None)
    compile_mode = None if mode in (None, "default") else mode
    if module is None:
        if mode is not None:  # torch.compile removes work whose result nobody uses: it would time nothing
            with torch.cuda.stream(torch_stream):
                returned = functions.torch_eager(views[0], size)
            if returned is None:
                raise ValueError("torch_eager returns nothing, so torch.compile would drop its work: return the op's outputs")
        eager = functions.torch_eager if mode is None else torch.compile(functions.torch_eager, mode=compile_mode)

        def run_eager(inputs: dict[str, cp.ndarray], at: dict[str, int], on: Any = None) -> None:
            with torch.cuda.stream(on or torch_stream):
                eager(inputs, at)

        return run_eager
    with torch.cuda.stream(torch_stream):
        model = module(views[0], size)[0]
        model = model if mode is None else torch.compile(model, mode=compile_mode)
        args = {_key(v): module(v, size)[1] for v in views}

    def run_model(inputs: dict[str, cp.ndarray], at: dict[str, int], on: Any = None) -> None:
        with torch.cuda.stream(on or torch_stream), torch.no_grad():
            model(*args[_key(inputs)])

    return run_model


def _torch_stream(stream: cp.cuda.Stream, state: TaskState) -> Callable[[], Any]:
    """A context that makes `stream` PyTorch's current stream, where the task's reference.py
    uses torch (it names it); else one that does nothing (no torch import for a CuPy library)."""
    if "torch" not in state.task.reference_source:
        return contextlib.nullcontext
    try:
        import torch
    except ImportError:  # the library then fails as it would have, and is left out
        return contextlib.nullcontext

    on = torch.cuda.ExternalStream(stream.ptr)
    return lambda: torch.cuda.stream(on)


def input_regions(views: list[dict[str, cp.ndarray]]) -> list[tuple[int, int]]:
    """(device address, bytes) of every input array of `views`, each once: what the comparators
    read, whose L2 lines `eval.comparator_flush = "certification"` sets back before each sample
    (their outputs are PyTorch's or the library's own, stored, not loaded under a hint)."""
    return sorted({(int(a.data.ptr), int(a.nbytes)) for view in views for a in view.values() if a.nbytes})


def _views(state: TaskState) -> list[dict[str, cp.ndarray]]:
    """Each benchmark set's inputs by name, as the comparators take them."""
    return [{k: g.array for k, g in s.buffers.inputs.items()} for s in state.sets]


def _key(inputs: dict[str, cp.ndarray]) -> tuple[int, ...]:
    """An input set by where its arrays live (the sets' dicts are rebuilt, the arrays are not)."""
    return tuple(a.data.ptr for a in inputs.values())


def import_torch_soon() -> threading.Thread | None:
    """Import PyTorch on a thread, if it is installed: the first task's preparation times
    PyTorch eager, and the import (seconds) would otherwise wait for it on the way to the
    worker's first result; here it overlaps the ceilings and the references. A later `import
    torch` waits for this one to finish (Python's import lock); a failed import is reported there.
    Returns the thread (None when PyTorch is not installed)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return None

    def run() -> None:
        try:
            import torch  # noqa: F401
        except Exception:  # Comparators.pytorch_us imports again and logs why
            pass

    thread = threading.Thread(target=run, daemon=True, name="import-torch")
    thread.start()
    return thread
