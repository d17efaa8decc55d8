"""A benchmark size that fits a GPU worker.

KernelBench files set their sizes for timing, not for memory: the median level-1 problem holds
about 4 GB of arguments at its own sizes and some hold 17 GB. A worker keeps several input sets,
their float64 expected outputs and a candidate's outputs on one GPU, so past a few GiB of
arguments the task does not fit. `fit` halves the largest size that scales the problem (never a
kernel, stride, padding, dilation, group count or axis: sizes.scaling) until the arguments, by the
task's fitted shapes, fit the bound, and checks each step on the meta device (no memory): the
module accepts the size and its shapes are the fitted ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from fsr import expr
from fsr.kernelbench import probe, sizes
from fsr.kernelbench.probe import ProblemError, Shapes
from fsr.types import bytes_text


class Shaped(Protocol):
    """A task argument as the plan has it: a dtype and a shape of expressions of the sizes."""

    @property
    def dtype(self) -> str: ...

    @property
    def shape(self) -> tuple[str, ...]: ...


def argument_bytes(args: Sequence[Shaped], at: dict[str, int]) -> int:
    """The bytes every argument (inputs, weights and buffers, outputs) holds at the sizes `at`."""
    return sum(np.dtype(a.dtype).itemsize * math.prod(expr.evaluate_int(d, at) for d in a.shape) for a in args)


def agrees(args: Sequence[Shaped], shapes: Shapes, at: dict[str, int]) -> bool:
    """Whether the fitted shapes at `at` are the ones the module gives there (args are ordered as
    the plan orders them: inputs, state, outputs)."""
    tensors = list(shapes.inputs) + [t for _, t in shapes.state] + list(shapes.outputs)
    return len(tensors) == len(args) and all(
        tuple(expr.evaluate_int(d, at) for d in a.shape) == t.shape for a, t in zip(args, tensors, strict=True))


def fit(source: str, bench: dict[str, int], args: Sequence[Shaped], max_bytes: int,
        same_signature: Callable[[Shapes], bool], ties: sizes.Ties) -> dict[str, int]:
    """`bench`, or where its arguments pass `max_bytes` (0: no bound) the size with the largest
    scaling sizes halved (followers with their leaders) until they fit; raises ProblemError when
    no smaller size runs."""
    if max_bytes == 0 or argument_bytes(args, bench) <= max_bytes:
        return bench

    def too_big(at: dict[str, int]) -> bool | None:
        try:
            shapes = probe.shapes(source, at)
        except ProblemError:
            return None
        if not same_signature(shapes) or not agrees(args, shapes, at):
            return None
        return argument_bytes(args, at) > max_bytes

    fitted = sizes.shrink(bench, [n for n in sizes.scaling(bench) if n not in ties], too_big, ties)
    if too_big(fitted) is not False:
        raise ProblemError(f"the arguments at the file's sizes hold {gigabytes(argument_bytes(args, bench))} and no "
                           f"smaller benchmark size within --max-bench-bytes {bytes_text(max_bytes)} runs")
    return fitted


def note(file_bench: dict[str, int], bench: dict[str, int], file_bytes: int, max_bytes: int) -> str:
    """'' or what the import line says of a scaled benchmark size."""
    changed = [n for n in file_bench if file_bench[n] != bench[n]]
    if not changed:
        return ""
    before = ", ".join(f"{n}={file_bench[n]}" for n in changed)
    after = ", ".join(f"{n}={bench[n]}" for n in changed)
    return (f"bench size scaled from {before} to {after} ({gigabytes(file_bytes)} of arguments; "
            f"--max-bench-bytes {bytes_text(max_bytes)})")


def gigabytes(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 10**9 else f"{n / 1e6:.1f} MB"



