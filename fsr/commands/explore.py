"""`fsr explore`: what a task's feature template reaches on the local GPU.

Evaluates many switch combinations of the template (and any fixed configurations the user gives)
through the same GpuEvaluator as `fsr eval` (compile, verify at every size, tune the remaining
tunables, time with the full protocol), then ranks the correct ones against the device's measured
ceiling, the baseline, the library and PyTorch eager. A configuration that fails is a row with
its verdict, never an exception.

Configurations, in order: those of `--configs` files, then every switch on, the template's
defaults, every switch on but one, then seeded random ones, duplicates dropped, up to `--combos`
of the generated ones. A tunable named in a configuration is fixed to that value (its list
shrinks to it); the others are tuned with `--trials` trials.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import asdict, dataclass, replace
from typing import Any

from fsr import candidate as cfmt
from fsr import config as cfg_mod
from fsr import tasks
from fsr.commands import EXIT_NO_DEVICE, EXIT_OK, EXIT_VERDICT, UsageError, at_least, config_option
from fsr.files import InputFileError, read_input
from fsr.types import Candidate, DeviceInfo, Evaluation, Task, Tunable, Verdict, WorkerSpec

Values = dict[str, int]
SHOWN_FAILURES = 8


def add_parser(sub: argparse._SubParsersAction) -> None:
    ex = sub.add_parser("explore", help="evaluate many switch combinations of a task's template on the local "
                                        "GPU; rank them against the ceiling, the library and PyTorch")
    ex.add_argument("task")
    ex.add_argument("file", nargs="?", help="a template in the candidate format (default: the task's template: "
                                            "its template.cu, or the one its task.toml names)")
    ex.add_argument("--combos", type=at_least(0), default=24,
                    help="generated switch combinations (default 24; 0: only --configs)")
    ex.add_argument("--configs", action="append", default=[], metavar="FILE.json",
                    help="fixed configurations evaluated first: a JSON list of {NAME: value} objects, or "
                         "{TASK: [...]} (repeatable)")
    ex.add_argument("--trials", type=config_option("tune", "trials"), default=16,
                    help="tuning trials for the tunables a configuration leaves free (default 16; 0: none)")
    ex.add_argument("--seed", type=at_least(0), default=0, help="seed of the random combinations")
    ex.add_argument("--top", type=at_least(1), default=12, help="rows in the table (default 12)")
    ex.add_argument("--timeout", type=config_option("eval", "timeout_s"),
                    help="seconds before a running kernel counts as hung")
    ex.add_argument("--json", action="store_true", help="print every row as one JSON document")


@dataclass(frozen=True)
class Row:
    """One configuration's result; the figures are None unless it was timed."""

    config: Values
    verdict: str
    message: str = ""
    median_us: float | None = None
    gbps: float | None = None
    tflops: float | None = None
    ceiling_fraction: float | None = None
    registers: int = 0
    defines: Values | None = None  # every define it ran with, tuned ones included


def combinations(template: Candidate, count: int, seed: int) -> list[Values]:
    """Up to `count` distinct switch settings: all on, the defaults, all on but one, then random."""
    names = [f.name for f in template.features]
    on = dict.fromkeys(names, 1)
    out = [on, {f.name: f.values[0] for f in template.features}] + [on | {n: 0} for n in names]
    rng = random.Random(seed)
    for _ in range(50 * count):
        if len(out) >= count:
            break
        out.append({f.name: rng.choice(f.values) for f in template.features})
    return unique(out)[:count]


def unique(configs: list[Values]) -> list[Values]:
    out: list[Values] = []
    for c in configs:
        if c not in out:
            out.append(c)
    return out


def fixed(template: Candidate, values: Values) -> Candidate:
    """The template with its switches set and each tunable named in `values` fixed to that value."""
    pinned = {t.name for t in template.tunables} & set(values)
    tunables = tuple(Tunable(t.name, (values[t.name],)) if t.name in pinned else t for t in template.tunables)
    return cfmt.with_defines(replace(template, tunables=tunables), {k: v for k, v in values.items() if k not in pinned})


def read_configs(paths: list[str], task: str) -> list[Values]:
    """The configurations of `--configs` files (a list, or this task's entry of {task: list})."""
    out: list[Values] = []
    for path in paths:
        try:
            data = json.loads(read_input(path, "--configs"))
        except json.JSONDecodeError as e:
            raise UsageError(f"--configs {path}: not JSON ({e})") from None
        except InputFileError as e:
            raise UsageError(str(e)) from None
        items = data.get(task, []) if isinstance(data, dict) else data
        if not isinstance(items, list) or not all(_is_config(c) for c in items):
            raise UsageError(f"--configs {path}: expected a list of {{NAME: integer}} objects"
                             f"{'' if isinstance(data, list) else f' under {task!r}'}")
        out += items
    return out


def _is_config(item: Any) -> bool:
    return isinstance(item, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in item.values())


def check_names(template: Candidate, configs: list[Values]) -> None:
    """Every name a configuration sets is a tunable or switch of the template; UsageError if not."""
    known = {t.name for t in template.tunables + template.features}
    for config in configs:
        unknown = sorted(set(config) - known)
        if unknown:
            raise UsageError(f"configuration {config}: the template has no tunable or switch named "
                             f"{', '.join(unknown)} (it has {', '.join(sorted(known)) or 'none'})")


def row_of(config: Values, ev: Evaluation) -> Row:
    t = ev.timing
    row = Row(config, str(ev.verdict), " ".join(ev.message.split())[:300], registers=ev.resources.registers,
              defines=dict(ev.tuned_defines) or None)
    if t is None or ev.verdict != Verdict.OK:
        return row
    return replace(row, median_us=t.median_us, gbps=t.gbps, tflops=t.tflops, ceiling_fraction=t.ceiling_fraction)


def rank(rows: list[Row]) -> list[Row]:
    """Timed rows fastest first, then the others in the order they were evaluated."""
    timed = sorted((r for r in rows if r.median_us is not None), key=lambda r: r.median_us or 0.0)
    return timed + [r for r in rows if r.median_us is None]


def _ratio(reference: float | None, median: float | None) -> str:
    return f"{reference / median:.2f}x" if reference and median else "-"


def to_markdown(task: str, device: DeviceInfo, comparators: dict[str, float | None], ranked: list[Row],
                top: int) -> str:
    """The fastest `top` rows as a table, then a line for each of the first few failures."""
    figures = ", ".join(f"{k} {v:.1f} us" for k, v in comparators.items() if v)
    lines = [f"## {task}: {len(ranked)} configurations on {device.name}",
             f"Copy {device.copy_gbps:.0f} GB/s, SGEMM {device.sgemm_tflops:.1f} TFLOP/s; {figures or 'no comparators'}.",
             "", "| us | of ceiling | GB/s | TFLOP/s | vs baseline | vs library | vs torch | regs | defines |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in [r for r in ranked if r.median_us is not None][:top]:
        defines = " ".join(f"{k}={v}" for k, v in (r.defines or r.config).items())
        lines.append(f"| {r.median_us:.1f} | {100 * (r.ceiling_fraction or 0):.1f}% | {r.gbps or 0:.0f} "
                     f"| {r.tflops or 0:.2f} | {_ratio(comparators['baseline'], r.median_us)} "
                     f"| {_ratio(comparators['library'], r.median_us)} | {_ratio(comparators['torch'], r.median_us)} "
                     f"| {r.registers} | {defines} |")
    failed = [r for r in ranked if r.verdict != str(Verdict.OK)]
    lines += [f"- {r.verdict} {r.config}: {r.message[:160]}" for r in failed[:SHOWN_FAILURES]]
    if len(failed) > SHOWN_FAILURES:
        lines.append(f"- ... and {len(failed) - SHOWN_FAILURES} more not OK (--json lists them all)")
    return "\n".join(lines) + "\n"


def template_of(task: Task, file: str | None) -> Candidate:
    """The template to explore: FILE, else the task's template (its own or the one it names), else
    its baseline."""
    if file is not None:
        from fsr.commands.eval import load_candidate

        return load_candidate(task, file)
    if not (task.template_source or task.baseline_source):  # an imported task: nothing to explore yet
        raise UsageError(f"{task.name} has no template.cu or baseline.cu: name a template file "
                         f"(fsr explore {task.name} FILE.cu)")
    return cfmt.parse(task.template_source or task.baseline_source, task)


def explore_command(args: argparse.Namespace) -> int:
    overrides: dict[str, dict[str, Any]] = {"tune": {"trials": args.trials}, "eval": {}}
    if args.timeout:
        overrides["eval"]["timeout_s"] = args.timeout
    config = cfg_mod.load(args.config, overrides)
    task = tasks.load(args.task, args.tasks_dir)
    template = template_of(task, args.file)
    configs = unique(read_configs(args.configs, task.name) + combinations(template, args.combos, args.seed))
    check_names(template, configs)
    if not configs:
        raise UsageError("no configurations: --combos 0 and no --configs")

    from fsr.commands.launch import device_problem
    from fsr.evaluate.evaluator import GpuEvaluator
    from fsr.evaluate.sandbox import NoDevice
    from fsr.types import EvaluatorFault

    problem = device_problem()  # in one line, before a GPU child is started for nothing
    if problem is not None:
        print(f"fsr: exploring needs a CUDA device; {problem}", file=sys.stderr)
        return EXIT_NO_DEVICE
    evaluator = GpuEvaluator(WorkerSpec.of(config, [task]))
    try:
        try:
            device = evaluator.device()
        except NoDevice as e:
            print(f"fsr: exploring needs a CUDA device ({' '.join(str(e).split())})", file=sys.stderr)
            return EXIT_NO_DEVICE
        evaluations = evaluate_all(evaluator, template, configs, args.trials > 0)
    except EvaluatorFault:  # fsr's own: one line and exit 3 (fsr.cli), not a verdict
        raise
    except RuntimeError as e:  # the task's baseline is not OK: nothing can be compared with it
        print(f"fsr: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_VERDICT
    finally:
        evaluator.close()
    ranked = rank([row_of(c, ev) for c, ev in zip(configs, evaluations, strict=True)])
    first = next((ev for ev in evaluations if ev.baseline_us is not None), evaluations[0])
    comparators = {"baseline": first.baseline_us, "library": first.library_us, "torch": first.torch_us,
                   "torch_compile": first.torch_compile_us}
    if args.json:
        print(json.dumps({"task": task.name, "device": asdict(device), **{f"{k}_us": v for k, v in comparators.items()},
                          "rows": [asdict(r) for r in ranked]}, indent=1))
    else:
        print(to_markdown(task.name, device, comparators, ranked, args.top), end="")
    return EXIT_OK


def evaluate_all(evaluator: Any, template: Candidate, configs: list[Values], tune: bool) -> list[Evaluation]:
    """Each configuration's evaluation, one progress line each on stderr."""
    out = []
    for i, values in enumerate(configs, 1):
        ev = evaluator.evaluate(fixed(template, values), tune=tune)
        figure = f" {ev.timing.median_us:.1f} us" if ev.timing and ev.verdict == Verdict.OK else ""
        print(f"fsr: {i}/{len(configs)} {ev.verdict}{figure} {' '.join(f'{k}={v}' for k, v in values.items())}",
              file=sys.stderr, flush=True)
        out.append(ev)
    return out
