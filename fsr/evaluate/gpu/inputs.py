"""The GPU child's per-task state: fresh inputs and float64 references for the test sizes (made
ahead on a thread), and the benchmark input sets on the device, which every timing rotates
through, with their expected outputs. Runs in the evaluator's child process only (imports cupy).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any

import cupy as cp
import cupyx
import numpy as np

from fsr import tasks
from fsr.dtypes import FLOAT
from fsr.evaluate.gpu.buffers import Buffers
from fsr.evaluate.gpu.verify import Expected, expect
from fsr.types import Candidate, Task

Content = tuple[dict[str, np.ndarray], dict[str, Expected]]  # inputs, and the expected outputs
# Stress checks: the float inputs of one test size scaled by each factor (a kernel right only at
# the usual magnitudes, or one that scales a cached answer, is wrong there); integer inputs
# (indices, counts, targets) are left as they are.
STRESS_SCALES = (1e-3, 64.0)
# Perturbations drawn to measure an output's sensitivity at a stress scale (error_growth): the
# largest change of one draw is noisy where few elements are ill-conditioned (attention's near
# ties). In CPU emulations of attention's float32 baseline at x64 (three sizes, 16 to 32 draws
# of inputs each), one nudge let the worst honest error reach 2.8 times its bound, four 0.65 and
# eight 0.38. Eight cost 17 more reference runs per stress item: 0.1-0.9 s for the slowest
# (attention, jacobi2d) on a shared two-core host, made ahead by the pool's thread.
NUDGES = 8


def stress_checks(task: Task) -> tuple[tuple[int, float], ...]:
    """The checks of a candidate, as (test size index, input scale): every test size as drawn,
    then, unless the task opts out (task.toml `stress = false`) or has no float input, the
    second largest test size at each of STRESS_SCALES."""
    plain = tuple((i, 1.0) for i in range(len(task.test_sizes)))
    if not task.stress or not any(a.dtype in FLOAT for a in task.inputs):
        return plain
    index = max(len(task.test_sizes) - 2, 0)
    return plain + tuple((index, scale) for scale in STRESS_SCALES)


def scaled(inputs: dict[str, np.ndarray], scale: float) -> dict[str, np.ndarray]:
    """Float arrays multiplied by `scale` and rounded to their own dtype (NumPy's floats in that
    dtype; bfloat16 and fp8, which ml_dtypes gives no arithmetic of their own, in float32); the
    others as they are."""
    return {k: _times(v, scale) if v.dtype.name in FLOAT else v for k, v in inputs.items()}


def _times(v: np.ndarray, scale: float) -> np.ndarray:
    if v.dtype.kind == "f":
        return (v * v.dtype.type(scale)).astype(v.dtype)
    return (v.astype(np.float32) * np.float32(scale)).astype(v.dtype)


def make_content(task: Task, module: Any, dtypes: dict[str, str], size: dict[str, int],
                 rng: np.random.Generator, scale: float = 1.0) -> Content:
    """Fresh inputs at one size (float inputs times `scale`) and the reference's outputs for
    them (the reference gets copies: it may not change what the kernel will see). Scaled, each
    output's atol grows as an honest float32 computation's error does (`error_growth`): the
    task's atol is an error at the usual magnitudes."""
    drawn = module.make_inputs(dict(size), rng)
    inputs = scaled(drawn, scale) if scale != 1.0 else drawn
    tasks.check_inputs(task, inputs, size)  # a kernel reads its buffers' bytes as declared
    reference = module.reference({k: v.copy() for k, v in inputs.items()}, dict(size))
    tol = tasks.tolerance(task)
    growth = error_growth(module, drawn, inputs, reference, size, rng) if scale != 1.0 and tol.atol else {}
    return inputs, {k: expect(v, dtypes[k], replace(tol, atol=tol.atol * growth.get(k, 1.0)))
                    for k, v in reference.items()}


def error_growth(module: Any, drawn: dict[str, np.ndarray], inputs: dict[str, np.ndarray],
                 reference: dict[str, Any], size: dict[str, int], rng: np.random.Generator) -> dict[str, float]:
    """How much each output's honest float32 error grows from the inputs as `drawn` to the
    scaled `inputs` (whose reference outputs are `reference`): the larger of how its RMS moved
    and how its sensitivity to float32 rounding moved. The sensitivity is the reference's largest
    change over NUDGES draws of a perturbation of every float input by up to one float32 unit
    roundoff (each draw the same relative perturbation at both scales). An op whose conditioning
    worsens with scale (softmax of scores 64^2 times larger is peaked: a score's rounding moves
    the weights far more) gets the room its float32 arithmetic needs; for a linear op both
    measures move alike. bfloat16 and fp8 inputs are not nudged (a float32 roundoff rounds away
    in them): where only they are float, the RMS's growth is the one measure. Not called where
    atol is 0 (the default of half-precision tasks): nothing to grow."""
    usual = module.reference({k: v.copy() for k, v in drawn.items()}, dict(size))
    change_usual = dict.fromkeys(reference, 0.0)
    change_scaled = dict.fromkeys(reference, 0.0)
    for _ in range(NUDGES):
        nudge = {k: 1 + rng.uniform(-1.0, 1.0, v.shape) * 2.0**-24 for k, v in drawn.items() if v.dtype.kind == "f"}
        for before, arrays, change in ((usual, drawn, change_usual), (reference, inputs, change_scaled)):
            moved = {k: (v * nudge[k]).astype(v.dtype) if k in nudge else v.copy() for k, v in arrays.items()}
            after = module.reference(moved, dict(size))
            for k in change:
                change[k] = max(change[k], _largest_change(after[k], before[k]))
    return {k: max(_ratio(_rms(reference[k]), _rms(usual[k])), _ratio(change_scaled[k], change_usual[k]))
            for k in reference}


def _largest_change(moved: Any, before: Any) -> float:
    change = np.abs(np.asarray(moved, np.float64) - np.asarray(before, np.float64))
    return float(change.max()) if change.size else 0.0


def _rms(a: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    return float(np.sqrt(np.mean(np.square(a)))) if a.size else 0.0


def _ratio(scaled: float, usual: float) -> float:
    """How much a measure moved (1 where either is 0 or not finite)."""
    if usual > 0 and scaled > 0 and np.isfinite(usual) and np.isfinite(scaled):
        return scaled / usual
    return 1.0


@dataclass
class BenchSet:
    """Device buffers at the benchmark size, which of the task's benchmark contents they hold,
    and that content's expected outputs on the device (every timed run's outputs are compared
    with them: fsr.evaluate.gpu.timed_runs)."""

    buffers: Buffers
    content: int
    expected: dict[str, Any] = field(default_factory=dict)  # output -> timed_runs.DeviceExpected
    fingerprints: list[int] = field(default_factory=list)  # of the inputs as uploaded: timed runs may not change them


@dataclass
class TaskState:
    """A task prepared in the child: its input pool, its benchmark contents and their device
    sets, and pinned host arrays that outputs at the benchmark size come back through."""

    task: Task
    pool: InputPool
    contents: list[Content] = field(default_factory=list)
    sets: list[BenchSet] = field(default_factory=list)
    pinned: dict[str, np.ndarray] = field(default_factory=dict)

    def close(self) -> None:
        """Drop the task's host and device arrays (back to CuPy's pools) and stop its input thread."""
        self.pool.stop()
        self.contents, self.sets, self.pinned = [], [], {}
        tasks.forget(self.task)  # and its module's caches (an imported task's comparator model)

    def landing(self, name: str, like: cp.ndarray) -> np.ndarray:
        """A pinned host array for output `name` at the benchmark size (copies back at full
        bus speed; pageable memory is staged through a bounce buffer)."""
        if name not in self.pinned:
            self.pinned[name] = cupyx.empty_pinned(like.shape, like.dtype)
        return self.pinned[name]


class InputPool:
    """Fresh inputs and references for every check (`checks`: every test size, then the stress
    checks), made ahead by a thread so the host's reference work overlaps the GPU's. Item `i` is
    for check `i`; the first len(test_sizes) are the test sizes, in order. Each item is used once."""

    def __init__(self, task: Task, seed: int, depth: int = 2):
        self.task = task
        self.sizes = task.test_sizes
        self.checks = stress_checks(task)
        self.depths = [depth] * len(self.checks)
        self.module = tasks.functions(task)
        self.items: list[list[Content]] = [[] for _ in self.checks]
        self.cond = threading.Condition()
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, int(task.content_hash, 16)]))
        self.stopped = False
        self.error: Exception | None = None
        threading.Thread(target=self._fill, daemon=True, name=f"inputs-{task.name}").start()

    def stop(self) -> None:
        """End the filling thread (after the item it is making) and drop what it made."""
        with self.cond:
            self.stopped = True
            self.items = [[] for _ in self.checks]
            self.cond.notify_all()

    def make(self, size: dict[str, int], rng: np.random.Generator, scale: float = 1.0) -> Content:
        return make_content(self.task, self.module, {a.name: a.dtype for a in self.task.outputs}, size, rng, scale)

    def take(self, index: int) -> Content:
        """The next item at test size `index`; raises what making one raised (the thread ends)."""
        with self.cond:
            while not self.items[index] and self.error is None:
                self.cond.wait()
            if not self.items[index]:
                raise self.error  # type: ignore[misc]  # not None: the loop ended
            item = self.items[index].pop(0)
            self.cond.notify_all()
            return item

    def _fill(self) -> None:
        while True:
            with self.cond:
                while not self.stopped and all(len(q) >= d for q, d in zip(self.items, self.depths, strict=True)):
                    self.cond.wait()
                if self.stopped:
                    return
                index = min(range(len(self.items)), key=lambda i: len(self.items[i]) / self.depths[i])
            try:
                size, scale = self.checks[index]
                item = self.make(dict(self.sizes[size]), self.rng, scale)
            except Exception as e:  # a task's fault: whoever takes an item gets it, rather than waiting forever
                with self.cond:
                    self.error = e
                    self.cond.notify_all()
                return
            with self.cond:
                if self.stopped:
                    return
                self.items[index].append(item)
                self.cond.notify_all()


def no_scratch(task: Task) -> Candidate:
    return Candidate(task=task.name, source="", launches=())
