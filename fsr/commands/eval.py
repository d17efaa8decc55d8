"""`fsr eval`: one kernel on the local GPU, no Ray."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from fsr import candidate as cfmt
from fsr import config as cfg_mod
from fsr import run_json, tasks
from fsr.commands import EXIT_NO_DEVICE, EXIT_OK, EXIT_VERDICT, UsageError
from fsr.dtypes import LOW_PRECISION, flop_ceiling
from fsr.files import read_input
from fsr.types import Candidate, DeviceInfo, Evaluation, Task, Verdict, WorkerSpec, size_label


def load_candidate(task: Task, file: str) -> Candidate:
    """The candidate in `file`; UsageError naming the file and what is wrong with it."""
    text = read_input(file)  # InputFileError: one line, exit 2
    if not text.strip():
        raise UsageError(f"{file}: is empty")
    try:
        return cfmt.parse(text, task)
    except cfmt.HeaderError as e:
        raise UsageError(f"{file}: {e}") from None


def check_arch(arch: str) -> None:
    """A device architecture this NVRTC compiles candidates for ("" is the device's own; sm_90a as
    well as sm_90, whose wgmma code compiles for sm_90a: fsr.evaluate.compile.target_arch); UsageError
    naming the ones it knows if not: an unknown one would otherwise be every candidate's
    COMPILE_ERROR."""
    if not arch:
        return
    from fsr.evaluate.compile import _library, compiles_for, target_arch

    if not compiles_for(target_arch(arch)):
        plain = [f"sm_{a}" for a in _library().getSupportedArchs()]
        known = [name for a in plain for name in dict.fromkeys((a, target_arch(a)))]
        raise UsageError(f"architecture {arch}: this NVRTC compiles for {', '.join(known)}")


def check_lineage_dir(run_dir: str | None) -> None:
    """`--lineage` must name a directory (or nothing yet), and a run.json there must be readable."""

    if run_dir is None:
        return
    path = Path(run_dir)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--lineage {run_dir}: not a directory")
    if (path / "run.json").exists():
        run_json.read_run_json(path)


def eval_command(args: argparse.Namespace) -> int:
    overrides: dict[str, dict] = {"eval": {}, "tune": {}}
    if args.timeout:
        overrides["eval"]["timeout_s"] = args.timeout
    if args.arch:
        overrides["eval"]["arch"] = args.arch
    if args.tune_trials is not None:
        overrides["tune"]["trials"] = args.tune_trials
    config = cfg_mod.load(args.config, overrides)
    check_arch(config.eval.arch)
    task = tasks.load(args.task, args.tasks_dir)
    cand = load_candidate(task, args.file)
    check_lineage_dir(args.lineage)
    tune = args.tune or (args.tune_trials or 0) > 0

    from fsr.evaluate.evaluator import GpuEvaluator
    from fsr.evaluate.sandbox import NoDevice
    from fsr.evaluate.static import static_stage

    # Built first (its GPU child starts with `device`), so that the static stage compiles through
    # the evaluator's compile service: bounded processes and the node's disk cache.
    evaluator = GpuEvaluator(WorkerSpec.of(config, [task], journal_dir=args.lineage))
    try:
        static = static_stage(cand, task, config.eval.arch or "sm_90", evaluator.compiler)
        if static.verdict is not None:
            return report(static.verdict, task, args, [])
        try:
            evaluator.device()
        except NoDevice as e:
            return no_device(static, cand, args, str(e))
        results, walls = [], []
        for _ in range(args.repeat):
            started = time.perf_counter()
            results.append(evaluator.evaluate(cand, tune=tune))
            walls.append(time.perf_counter() - started)
    finally:
        evaluator.close()
    if args.lineage:
        append_lineage(args.lineage, cand, results, config, evaluator.sandbox.device)
    if args.json:
        for result, wall in zip(results[:-1], walls[:-1], strict=False):
            print(json.dumps(to_json(result, [wall]), default=str))
        walls = walls[-1:]
    return report(results[-1], task, args, walls, device=evaluator.sandbox.device)


def no_device(static, cand: Candidate, args: argparse.Namespace, reason: str) -> int:
    res = static.compiled.resources
    if args.json:
        print(json.dumps({"candidate_id": cand.id, "verdict": None, "compiled": True,
                          "resources": dataclasses.asdict(res), "error": f"no CUDA device: {reason}"}))
    else:
        print(f"compiled {cand.id}: {res.registers} registers, {res.spill_bytes} B spills, "
              f"{res.smem_static_bytes} B static shared memory ({static.compiled.seconds:.2f} s)")
        print(f"fsr: checking and timing need a CUDA device ({reason})", file=sys.stderr)
    return EXIT_NO_DEVICE


def append_lineage(run_dir: str, cand: Candidate, results: list[Evaluation], config: cfg_mod.Config,
                   device: DeviceInfo | None = None) -> None:
    """The evaluations appended to `run_dir`'s lineage (run.json written first where it lacks
    one), and the GPU that gave them recorded in run.json as the worker "local"."""
    from fsr import lineage

    path = Path(run_dir)
    if not (path / "run.json").exists():
        run_json.write_run_json(path, cfg_mod.to_dict(config), {"command": "fsr eval"})
    if device is not None:
        run_json.record_devices(path, {"local": device})
    with lineage.LineageWriter(path) as writer:
        for result in results:
            writer.append(cand, replace(result, worker="local"))


def report(result: Evaluation, task: Task, args: argparse.Namespace, walls: list[float], device=None) -> int:
    if args.json:
        print(json.dumps(to_json(result, walls), default=str))
    else:
        print_table(result, task, walls, device)
    return EXIT_OK if result.verdict == Verdict.OK else EXIT_VERDICT


def to_json(result: Evaluation, walls: list[float]) -> dict:
    data = dataclasses.asdict(result)
    data["verdict"] = str(result.verdict)
    data["speedup"] = result.speedup
    median = result.timing.median_us if result.timing else None
    data["vs_library"] = result.library_us / median if result.library_us and median else None
    data["vs_torch"] = result.torch_us / median if result.torch_us and median else None
    data["vs_torch_compile"] = result.torch_compile_us / median if result.torch_compile_us and median else None
    data["wall_s_each"] = walls
    if data.get("timing"):
        data["timing"]["samples_us"] = list(result.timing.samples_us) if result.timing else []
    return data


def print_table(result: Evaluation, task: Task, walls: list[float], device) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    style = "green" if result.verdict == Verdict.OK else "red"
    console.print(f"[bold]{task.name}[/] candidate {result.candidate_id}: [{style}]{result.verdict}[/]"
                  + (f" on {result.device}" if result.device else ""))
    if result.message:
        console.print(result.message, markup=False, highlight=False)
    if result.checks:
        checks = Table("size", "check", "max abs err", box=None)
        for c in result.checks:
            label = size_label(c.size) + (" (bench, after timing)" if c.size == task.bench_size else "")
            checks.add_row(label, "pass" if c.passed else f"FAIL {c.detail[:160]}", f"{c.max_abs_err:.2e}")
        console.print(checks)
    summary = Table("", "", box=None, show_header=False)
    if result.timing:
        t = result.timing
        summary.add_row("median", f"{t.median_us:.1f} us  (p10 {t.p10_us:.1f}, p90 {t.p90_us:.1f}, "
                        f"{len(t.samples_us)} samples at {size_label(task.bench_size)})")
        summary.add_row("throughput", f"{t.gbps:.0f} GB/s, {t.tflops:.2f} TFLOP/s")
        if device is not None:
            rate = (f"{task.dtype} tensor cores {flop_ceiling(device, task.dtype):.1f}" if task.dtype in LOW_PRECISION
                    else f"SGEMM {device.sgemm_tflops:.1f}")
            summary.add_row("of ceiling", f"{100 * t.ceiling_fraction:.1f}%  (copy {device.copy_gbps:.0f} GB/s, "
                            f"{rate} TFLOP/s measured)")
    if result.baseline_us and result.timing:
        summary.add_row("vs baseline", f"{result.baseline_us / result.timing.median_us:.2f}x  "
                        f"(baseline {result.baseline_us:.1f} us)")
    if result.library_us and result.timing:
        summary.add_row("vs library", f"{result.library_us / result.timing.median_us:.2f}x  "
                        f"({task.library or 'library'} {result.library_us:.1f} us)")
    if result.torch_us and result.timing:
        summary.add_row("vs torch", f"{result.torch_us / result.timing.median_us:.2f}x  "
                        f"(PyTorch eager {result.torch_us:.1f} us)")
    if result.torch_compile_us and result.timing:
        compiled = f", compiled in {result.torch_compile_s:.1f} s" if result.torch_compile_s else ""
        summary.add_row("vs torch.compile", f"{result.torch_compile_us / result.timing.median_us:.2f}x  "
                        f"(torch.compile {result.torch_compile_us:.1f} us{compiled})")
    r = result.resources
    if r.registers:
            summary.add_row("resources", f"{r.registers} registers, {r.spill_bytes} B spills, "
                        f"{r.smem_static_bytes} B static smem, {r.stack_bytes} B stack")
    if result.tuned_defines:
        summary.add_row("defines", " ".join(f"{k}={v}" for k, v in result.tuned_defines)
                        + (f"  ({result.tune_trials} tuning trials)" if result.tune_trials else ""))
    if result.verify_s or result.bench_s:
        summary.add_row("stages", f"compile {result.compile_s:.3f} s, verify {result.verify_s:.3f} s, "
                        f"tune {result.tune_s:.3f} s, time {result.bench_s:.3f} s")
    if walls:
        summary.add_row("wall", ", ".join(f"{w:.2f} s" for w in walls))
    console.print(summary)
