"""`fsr launch`: one configuration of a kernel, launched alone on the task's inputs, nothing
checked or timed unless asked: a target for Nsight Compute or compute-sanitizer.

    ncu --kernel-name KERNEL --launch-skip 1 --launch-count 1 --set full fsr launch TASK FILE.cu ...
    compute-sanitizer --tool memcheck fsr launch TASK FILE.cu --size 0

The candidate is compiled as fsr compiles it and launched as fsr declares its launches (grid,
block, dynamic shared memory, poisoned outputs, zeroed or poisoned scratch), `--launches` times
(the first loads the module and warms the caches), in this process: no GPU child, no sandbox, so
a profiler or sanitizer sees the launches without following child processes.

`--error` then compares the outputs with the task's float64 reference: the worst
|out - ref| / (atol + rtol * max(|ref|, floor * mean |ref|)) over the elements (above 1 fails
fsr's check; fsr.dtypes.bounds), per output (with its dtype and the tolerance that dtype gets)
and size, worst over `--seeds` input sets, and the same for the task's library on the same inputs.
The input sets are drawn from seeds `--seed`, `--seed` + 1, ... (default 0), as certification
draws each of its sets from one seed: a certification's seed from the lineage's `certify_seeds`
launches the kernel on that set's inputs again, at the set's size (docs/lineage.md).
It belongs here rather than in `fsr explore`: it is a property of one fixed configuration on
given inputs, needs the outputs themselves (an evaluation keeps only pass/fail and the largest
absolute error), and is worth knowing before a kernel fails, e.g. for a faster but less exact
summation order.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fsr import candidate as cfmt
from fsr import dtypes, tasks
from fsr.commands import EXIT_NO_DEVICE, EXIT_OK, EXIT_VERDICT, UsageError, at_least, non_empty
from fsr.types import Candidate, Size, Task, size_label

DEFAULT_ARCH = "sm_90"  # compile target without a device, as `fsr eval` uses
MAX_BLOCK_THREADS = 1024  # threads a block may hold on every CUDA architecture


def parse_define(text: str) -> tuple[str, int]:
    """An argparse `type=` for `--define NAME=VALUE` (VALUE an integer)."""
    name, sep, value = text.partition("=")
    try:
        if sep and cfmt.NAME_RE.match(name.strip()):
            return name.strip(), int(value)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected NAME=INTEGER, not {text!r}")


def add_parser(sub: argparse._SubParsersAction) -> None:
    la = sub.add_parser("launch", help="launch one configuration of a kernel alone on the task's inputs "
                                       "(for ncu or compute-sanitizer); --error: how close to the tolerance")
    la.add_argument("task")
    la.add_argument("file", type=non_empty("a .cu file"), help="a .cu file in the candidate format (a template, a baseline, an export)")
    la.add_argument("--define", "-D", type=parse_define, action="append", default=[], metavar="NAME=VALUE",
                    help="a tunable or switch value (repeatable; the others keep their defaults)")
    la.add_argument("--size", action="append", default=[], metavar="SIZE",
                    help="'bench' (default), a test size's index (0 = the first in task.toml) or 'all' "
                         "(every test size and the bench size); repeatable")
    la.add_argument("--launches", type=at_least(1), default=2,
                    help="times each size's launch sequence runs (default 2: the first loads the module)")
    la.add_argument("--error", action="store_true",
                    help="compare the outputs with the reference: worst error over tolerance (and the library's)")
    la.add_argument("--seeds", type=at_least(1), default=1, help="input sets for --error (default 1)")
    la.add_argument("--seed", type=at_least(0), default=0,
                    help="the first input set's seed (default 0); a certification's recorded seed "
                         "(the lineage's certify_seeds) draws that set's inputs again")
    la.add_argument("--json", action="store_true", help="print the launches (and errors) as JSON")


def choose_sizes(task: Task, specs: list[str]) -> list[Size]:
    """The sizes `--size` names, in order, without repeats; UsageError for one the task lacks."""
    out: list[Size] = []
    for spec in specs or ["bench"]:
        if spec == "bench":
            chosen = [task.bench_size]
        elif spec == "all":
            chosen = [*task.test_sizes, task.bench_size]
        elif spec.isdigit() and int(spec) < len(task.test_sizes):
            chosen = [task.test_sizes[int(spec)]]
        else:
            raise UsageError(f"--size {spec}: expected 'bench', 'all' or a test size's index "
                             f"0..{len(task.test_sizes) - 1} ({task.name} has {len(task.test_sizes)} test sizes)")
        out += [s for s in chosen if s not in out]
    return out


def error_ratio(got: np.ndarray, reference: np.ndarray, tol: dtypes.Tolerance) -> float:
    """The worst |got - ref| / bound (fsr.dtypes.bounds; `got` in any dtype, converted to
    float64 first): 1 is the tolerance; NaN or a miss where the tolerance is zero reads as infinity."""
    ref = np.asarray(reference, dtype=np.float64)
    diff = np.abs(np.asarray(got).astype(np.float64) - ref)
    if diff.size == 0:
        return 0.0
    if np.isnan(diff).any():
        return math.inf
    bound = dtypes.bounds(ref, tol)
    ratio = np.divide(diff, bound, out=np.where(diff > 0, np.inf, 0.0), where=bound > 0)
    return float(ratio.max())


@dataclass(frozen=True)
class SizeRun:
    """What ran at one size: each launch's (kernel, grid, block, dynamic smem bytes), and with
    --error the worst error ratio per output (and the library's), worst over the seeds."""

    size: Size
    launches: tuple[tuple[str, tuple[int, ...], tuple[int, ...], int], ...]
    error: dict[str, float] | None = None
    library_error: dict[str, float] | None = None


def planned(cand: Candidate, sizes: list[Size]) -> list[SizeRun]:
    """The launches at each size, from the header alone (no device)."""
    return [SizeRun(size, tuple((launch.kernel, grid, block, smem) for launch, (grid, block, smem)
                                in cfmt.launches_at(cand, dict(size))))
            for size in sizes]


def check_blocks(runs: list[SizeRun]) -> None:
    """Every launch's block within CUDA's limit; UsageError naming the first that is not (a -D
    value, or a header, that no GPU can launch)."""
    for run in runs:
        for kernel, _, block, _ in run.launches:
            if math.prod(block) > MAX_BLOCK_THREADS:
                raise UsageError(f"{kernel}: block {block} at {size_label(run.size)} holds {math.prod(block)} "
                                 f"threads; CUDA allows at most {MAX_BLOCK_THREADS}")


def device_problem() -> str | None:
    """Why no CUDA device can be used here, or None."""
    import cupy as cp

    try:
        return None if cp.cuda.runtime.getDeviceCount() > 0 else "none is visible"
    except cp.cuda.runtime.CUDARuntimeError as e:
        if not Path("/dev/nvidiactl").exists():  # the runtime then blames the driver's version
            return "no NVIDIA driver is loaded on this machine"
        return f"none is usable here ({' '.join(str(e).split())})"


def launch_command(args: argparse.Namespace) -> int:
    from fsr.commands.eval import load_candidate
    from fsr.evaluate.compile import CompileFailed, CompileService

    task = tasks.load(args.task, args.tasks_dir)
    cand = cfmt.with_defines(load_candidate(task, args.file), dict(args.define))
    cfmt.check(cand, task)  # the defines may break a launch expression: HeaderError, one line
    runs = planned(cand, choose_sizes(task, args.size))
    check_blocks(runs)
    from fsr.evaluate import guards

    reason = guards.check(cand)  # what `fsr eval` rejects is not launched here either
    if reason:
        print(f"REJECTED {args.file}: {reason}", file=sys.stderr)
        return EXIT_VERDICT
    problem = device_problem()
    arch = DEFAULT_ARCH
    if problem is None:
        from fsr.evaluate.gpu.ceilings import device_info

        arch = device_info().arch
    try:
        compiled = CompileService().compile(cand, arch)  # the user's own file: compiled here, uncached
    except CompileFailed as e:
        print(f"COMPILE_ERROR {args.file}:\n{e.log}", file=sys.stderr)
        return EXIT_VERDICT
    resources = compiled.resources
    if problem is None:
        try:
            runs, resources = run_sizes(task, cand, compiled, runs, args.launches, args.seeds if args.error else 0,
                                        args.seed)
        except LaunchFailed as e:
            print(f"fsr: {e}", file=sys.stderr)
            return EXIT_VERDICT
    show(task, cand, runs, resources, args.json, ran=problem is None, launches=args.launches)
    if problem is not None:
        print(f"fsr: launching needs a CUDA device; {problem}", file=sys.stderr)
        return EXIT_NO_DEVICE
    return EXIT_OK


def show(task: Task, cand: Candidate, runs: list[SizeRun], resources: Any, as_json: bool, ran: bool,
         launches: int) -> None:
    defines = dict(cand.resolved_defines())
    kinds = {a.name: a.dtype for a in task.outputs}
    if as_json:
        print(json.dumps({"task": task.name, "candidate_id": cand.id, "defines": defines, "launched": ran,
                          "output_dtypes": kinds, "tolerance": dataclasses.asdict(tasks.tolerance(task)),
                          "launches_each": launches, "resources": dataclasses.asdict(resources),
                          "sizes": [{"size": dict(r.size), "launches": [
                              {"kernel": k, "grid": g, "block": b, "smem_bytes": s} for k, g, b, s in r.launches],
                              "error": r.error, "library_error": r.library_error} for r in runs]}))
        return
    verb = f"launched {launches} times at each size" if ran else "compiled (not launched)"
    print(f"{task.name} candidate {cand.id}: {verb}; {resources.registers} registers, {resources.spill_bytes} B "
          f"spills, {resources.smem_static_bytes} B static smem, {resources.stack_bytes} B stack")
    print("defines: " + (" ".join(f"{k}={v}" for k, v in defines.items()) or "none"))
    for r in runs:
        parts = [f"{k} grid {g} block {b} smem {s} B" for k, g, b, s in r.launches]
        print(f"{size_label(r.size)}: {'; '.join(parts)}")
        if r.error is not None:
            print(f"  worst error / tolerance ({tasks.tolerance(task).label()}): "
                  + ", ".join(f"{k} ({kinds[k]}) {v:.3g}" for k, v in r.error.items())
                  + ("; library " + ", ".join(f"{k} {v:.3g}" for k, v in r.library_error.items())
                     if r.library_error else ""))


class LaunchFailed(Exception):
    """The driver refused a launch, or a kernel broke the CUDA context."""


def run_sizes(task: Task, cand: Candidate, compiled: Any, runs: list[SizeRun], launches: int,
              seeds: int, first_seed: int = 0) -> tuple[list[SizeRun], Any]:
    """Launch at each size (`seeds` > 0: on that many input sets, with the error ratios), on the
    inputs drawn from seeds `first_seed`, `first_seed` + 1, ...; the runs with their errors, and
    the resources as the driver loaded the program."""
    import cupy as cp

    from fsr.evaluate.gpu.programs import LaunchRefused, Program

    try:
        program = Program(compiled.cubin, compiled.lowered)
        stream = cp.cuda.Stream(non_blocking=True)
        out = [_run_size(task, cand, program, run, launches, range(first_seed, first_seed + max(seeds, 1)),
                         bool(seeds), stream) for run in runs]
        return out, program.resources(compiled.resources)
    except LaunchRefused as e:
        raise LaunchFailed(f"launch refused: {e}") from None
    except (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError) as e:
        raise LaunchFailed(f"the kernel failed on the device: {' '.join(str(e).split())}") from None


def inputs_at(task: Task, size: Size, seed: int) -> dict[str, np.ndarray]:
    """The task's inputs at `size` drawn from `seed`, as certification draws a test size's or the
    benchmark's set from its recorded seed (fsr.certification.set_inputs)."""
    return dict(tasks.functions(task).make_inputs(dict(size), np.random.default_rng(seed)))


def _run_size(task: Task, cand: Candidate, program: Any, run: SizeRun, launches: int, seeds: range,
              check: bool, stream: Any) -> SizeRun:
    import cupy as cp

    from fsr.evaluate.gpu.buffers import make_buffers
    from fsr.evaluate.gpu.programs import enqueue, plan

    sizes, fn, tol = dict(run.size), tasks.functions(task), tasks.tolerance(task)
    worst: dict[str, float] = {}
    library: dict[str, float] = {}
    for seed in seeds:
        inputs = inputs_at(task, run.size, seed)
        with stream:
            buffers = make_buffers(task, cand, sizes, inputs)
            planned_launches = plan(program, cand, task, sizes, {k: g.array for k, g in buffers.all().items()})
            for _ in range(launches):
                buffers.reset(cand)
                enqueue(planned_launches, stream)
            stream.synchronize()
        if not check:
            continue
        reference = fn.reference({k: v.copy() for k, v in inputs.items()}, dict(sizes))
        for name, g in buffers.outputs.items():
            worst[name] = max(worst.get(name, 0.0), error_ratio(g.host(), reference[name], tol))
        got = _library_outputs(task, fn, inputs, run.size) if task.has_library else None
        if got is not None:
            for name in [n for n in buffers.outputs if isinstance(got, dict) and n in got]:
                out = dtypes.host_view(cp.asnumpy(got[name]), buffers.outputs[name].dtype.name)
                library[name] = max(library.get(name, 0.0), error_ratio(out, reference[name], tol))
    return dataclasses.replace(run, error=worst or None, library_error=library or None)


def _library_outputs(task: Task, fn: Any, inputs: dict[str, np.ndarray], size: Size) -> Any:
    """The task's library on `inputs`, or None, said on stderr, where it raises: a library that
    refuses a size (cuDNN's attention, pinned) has no error ratio there, the kernel's stands."""
    import cupy as cp

    try:
        return fn.library({k: cp.asarray(np.ascontiguousarray(v).view(dtypes.device_dtype(v.dtype.name)))
                           for k, v in inputs.items()}, dict(size))
    except Exception as e:  # the library's own refusal or failure, not the kernel's
        print(f"fsr launch: {task.name}'s library ({task.library or 'reference.py'}) did not run at "
              f"{size_label(size)}: {' '.join(str(e).split())[:300]}", file=sys.stderr)
        return None
