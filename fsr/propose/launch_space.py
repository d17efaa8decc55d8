"""A candidate's launch space, read from its launch expressions: other block sizes and other
amounts of work per thread, offered as new header text (the code after the header is kept).

This is what the offline proposer searches in a kernel that came with no feature template, such
as a user's baseline that declares `BLOCK = [256]`. Three rewrites, each declaring the values
as a tunable, so that the tuner (or the proposer's tunable move) then tries them:

- widen a tunable that sizes a block: every power of two that keeps each launch's block
  between one warp and 1024 threads;
- widen a tunable that divides only a grid (work per thread, e.g. `cdiv(n, BLOCK * ITEMS)`)
  by halving and doubling its values (a parent widened before is widened further) while the
  grid at the benchmark size keeps MIN_BLOCKS blocks;
- for a kernel that reads `gridDim` (a grid-stride loop), divide that grid dimension by a new
  work-per-thread tunable; and a literal block size that the grid repeats (`block = ["256"]`,
  `grid = ["cdiv(n, 256)"]`) becomes a tunable, when the kernel's code does not repeat it.

Like the source transforms, these are proposals, not proofs: a kernel that assumed its one
declared value is judged by the evaluator (a tuning trial that fails verification is
infeasible; a default that fails is the candidate's verdict).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator
from dataclasses import replace

from fsr import expr, tensormap
from fsr.candidate import HeaderError, launch_dims, launch_table, render, strip_comments, with_defines
from fsr.propose.transforms import kernel_spans, split
from fsr.types import Candidate, LaunchSpec, Task

POWERS_OF_TWO = tuple(2**k for k in range(11))  # 1 .. 1024
MIN_THREADS, MAX_THREADS = 32, 1024  # a block of less than a warp wastes lanes; 1024 is CUDA's limit
WORK_PER_THREAD = (1, 2, 4, 8, 16)
MIN_BLOCKS = 256  # a grid of fewer blocks at the benchmark size leaves most of a large GPU idle
WORK_NAME, BLOCK_NAME = "WORK_PER_THREAD", "BLOCK"
AXES = ("x", "y", "z")
_names_in = functools.lru_cache(maxsize=4096)(expr.names_in)  # expressions repeat across candidates


def rewrites(cand: Candidate, task: Task) -> Iterator[tuple[str, str]]:
    """Every launch-space rewrite of `cand` (new text, what it did), cheapest first."""
    block_names = {n for launch in cand.launches for d in launch.block for n in _names_in(d)}
    grid_names = {n for launch in cand.launches for d in launch.grid for n in _names_in(d)}
    for t in cand.tunables:
        if t.name in block_names:
            values = _block_values(cand, t.name)
        elif t.name in grid_names:
            values = tuple(w for w in sorted({w for v in t.values for w in (v // 2, v * 2) if w >= 1})
                           if _fills_device(cand, task, t.name, w))
        else:
            continue
        wider = t.values + tuple(v for v in values if v not in t.values)
        if wider != t.values:
            yield _rewrite(cand, {t.name: wider}), f"launch {t.name} in {list(wider)}"
    made = _work_per_thread(cand, task)
    if made is not None:
        yield made
    made = _literal_block(cand, task)
    if made is not None:
        yield made


def _block_values(cand: Candidate, name: str) -> tuple[int, ...]:
    """Powers of two for `name` that keep every launch's block within [MIN, MAX] threads, the
    other tunables at the candidate's values."""
    defines = dict(cand.resolved_defines())
    out = []
    for v in POWERS_OF_TWO:
        names = defines | {name: v}
        try:
            threads = [math.prod(expr.evaluate_int(d, names) for d in launch.block) for launch in cand.launches
                       if any(name in _names_in(d) for d in launch.block)]
        except expr.ExprError:
            continue
        if threads and all(MIN_THREADS <= n <= MAX_THREADS for n in threads):
            out.append(v)
    return tuple(out)


def _fills_device(cand: Candidate, task: Task, name: str, value: int) -> bool:
    """Whether every launch's grid keeps MIN_BLOCKS blocks at the benchmark size (or as many as
    it had) with `name` = `value`."""
    sizes = dict(task.bench_size)
    try:
        before = [math.prod(g) for g, _, _ in launch_dims(cand, sizes)]
        after = [math.prod(g) for g, _, _ in launch_dims(with_defines(cand, {name: value}), sizes)]
    except HeaderError:
        return False
    if len(after) != len(before):  # a `when` of the tunable's changes which launches run
        return False
    return all(a >= min(b, MIN_BLOCKS) for a, b in zip(after, before, strict=True))


def _work_per_thread(cand: Candidate, task: Task) -> tuple[str, str] | None:
    """Grid dimensions of kernels that read gridDim along them, divided by a new tunable."""
    name = _free_name(cand, task, WORK_NAME)
    if any(t.name.startswith(WORK_NAME) for t in cand.tunables):
        return None  # added before: widening covers it now
    launches, changed = [], False
    for launch in cand.launches:
        body = kernel_body(cand.source, launch.kernel)
        grid = tuple(f"cdiv({g}, {name})" if f"gridDim.{axis}" in body and _varies(g) else g
                     for g, axis in zip(launch.grid, AXES, strict=False))
        changed |= grid != launch.grid
        launches.append(replace(launch, grid=grid))
    if not changed:
        return None
    return _rewrite(cand, {name: WORK_PER_THREAD}, tuple(launches)), f"launch {name} in {list(WORK_PER_THREAD)}"


def _literal_block(cand: Candidate, task: Task) -> tuple[str, str] | None:
    """A 1-D literal block size that the launch's grid also uses, as a tunable."""
    code = strip_comments(split(cand.source)[1])
    name = _free_name(cand, task, BLOCK_NAME)
    for i, launch in enumerate(cand.launches):
        literal = launch.block[0].strip() if len(launch.block) == 1 else ""
        token = re.compile(rf"(?<![\w.]){re.escape(literal)}(?![\w.])")
        if not literal.isdigit() or not any(token.search(g) for g in launch.grid) or token.search(code):
            continue
        grid = tuple(token.sub(name, g) for g in launch.grid)
        new = replace(launch, block=(name,), grid=grid)
        values = (int(literal),) + tuple(v for v in (32, 64, 128, 256, 512, 1024) if v != int(literal))
        launches = cand.launches[:i] + (new,) + cand.launches[i + 1:]
        return _rewrite(cand, {name: values}, launches), f"launch {name} in {list(values)} (was {literal})"
    return None


def _varies(dim: str) -> bool:
    """A grid dimension that is not a constant (a constant grid is a design, e.g. one block)."""
    try:
        return bool(_names_in(dim))
    except expr.ExprError:
        return False


def _free_name(cand: Candidate, task: Task, base: str) -> str:
    taken = {t.name for t in cand.tunables + cand.features} | {a.name for a in task.args} \
        | set(task.size_names) | {c for c, _ in task.constants}
    name, k = base, 1
    while name in taken or re.search(rf"\b{name}\b", cand.source):
        name, k = f"{base}_{k}", k + 1
    return name


def kernel_body(source: str, kernel: str) -> str:
    """The code of `kernel`'s body (comments removed), by brace matching; "" if not found."""
    body = strip_comments(split(source)[1])
    return next((body[start:end] for m, start, end in kernel_spans(body) if m.group(2) == kernel), "")


def _rewrite(cand: Candidate, values: dict[str, tuple[int, ...]],
             launches: tuple[LaunchSpec, ...] | None = None) -> str:
    """The candidate's text with a new header: tunables updated or added, launches replaced."""
    tunables = {t.name: list(t.values) for t in cand.tunables} | {k: list(v) for k, v in values.items()}
    features = {t.name: list(t.values) for t in cand.features}
    specs = [launch_table(launch) for launch in launches or cand.launches]
    scratch = [{"name": s.name, "dtype": s.dtype, "count": s.count, "zero": s.zero} for s in cand.scratch]
    header, body = split(cand.source)
    if not header:
        raise HeaderError("no header to rewrite")
    return render(body, tunables, specs, scratch, features, [tensormap.to_table(m) for m in cand.tensormaps])
