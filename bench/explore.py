"""What a task's feature template can reach on this GPU: evaluate many switch combinations (and,
optionally, fixed tunable values) of the template with fsr's own GPU child, each tuned with
`--trials` trials, and list the fastest against the task's ceiling, the library and PyTorch eager.

    python bench/explore.py OUT_DIR TASK [TASK ...] [--combos N] [--trials T] [--configs FILE]

Combinations: every switch on, the template's defaults, every switch on but one, then seeded
random ones, up to N per task. `--configs FILE` (repeatable): a JSON object {task: [{DEFINE: value, ...}, ...]}
of extra configurations evaluated first (switches and tunables; tunables given there are fixed
by shrinking their lists to that value). Prints a Markdown table per task and writes
OUT_DIR/explore-TASK.json.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import replace
from pathlib import Path

from fsr import candidate as cfmt
from fsr import tasks
from fsr.evaluate.child import Child
from fsr.evaluate.compile import CompileFailed, compile_candidate
from fsr.types import Candidate, EvalRequest, Tunable, WorkerSpec


def combinations(template: Candidate, count: int, seed: int) -> list[dict[str, int]]:
    names = [f.name for f in template.features]
    on = {n: 1 for n in names}
    out = [on, {f.name: f.values[0] for f in template.features}]
    out += [on | {n: 0} for n in names]
    rng = random.Random(seed)
    tries = 0
    while len(out) < count and tries < 50 * count:
        tries += 1
        out.append({f.name: rng.choice(f.values) for f in template.features})
    unique: list[dict[str, int]] = []
    for c in out:
        if c not in unique:
            unique.append(c)
    return unique[:count]


def fixed(template: Candidate, values: dict[str, int]) -> Candidate:
    """The template with switches set and any tunable named in `values` fixed to that value."""
    tun = {t.name for t in template.tunables}
    pinned = tuple(Tunable(t.name, (values[t.name],)) if t.name in values else t for t in template.tunables)
    cand = replace(template, tunables=pinned)
    return cfmt.with_defines(cand, {k: v for k, v in values.items() if k not in tun}) if values else cand


def explore(child: Child, out: Path, name: str, combos: int, trials: int, extra: list[dict[str, int]]) -> None:
    task = tasks.load(name)
    prepared = child.prepare(name)
    template = cfmt.parse(task.template_source or task.baseline_source, task)
    sizes = dict(task.bench_size)
    nbytes, flops = tasks.bytes_moved(task, sizes), tasks.flops(task, sizes)
    configs = list(extra) + combinations(template, combos, 0)
    rows = []
    started = time.perf_counter()
    for values in configs:
        try:
            cand = fixed(template, values)
            compiled = compile_candidate(cand, child.device.arch)
        except (CompileFailed, cfmt.HeaderError) as e:
            rows.append({"config": values, "verdict": "COMPILE_ERROR", "message": str(e)[:200]})
            continue
        result = child.evaluate(EvalRequest(cand, compiled.cubin, compiled.lowered, trials))
        row = {"config": values, "verdict": result.verdict.name, "message": result.message[:200],
               "defines": dict(result.defines), "trials": len(result.trials),
               "regs": result.resources.registers if result.resources else None}
        if result.samples_us:
            us = sorted(result.samples_us)[len(result.samples_us) // 2]
            row["us"] = us
            row["gbps"] = nbytes / us / 1e3
            row["tflops"] = flops / us / 1e6
        rows.append(row)
    ok = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
    copy, peak = child.device.copy_gbps, child.device.sgemm_tflops
    summary = {"task": name, "device": child.device.name, "copy_gbps": copy, "sgemm_tflops": peak,
               "library_us": prepared.library_us, "torch_us": prepared.torch_us,
               "seconds": time.perf_counter() - started, "rows": rows}
    (out / f"explore-{name}.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"\n## {name}: {len(rows)} configurations in {summary['seconds']:.0f} s on {child.device.name}; "
          f"library {prepared.library_us} us, torch {prepared.torch_us} us; copy {copy:.0f} GB/s, "
          f"sgemm {peak:.1f} TFLOP/s")
    print("| us | GB/s (% copy) | TFLOP/s | vs library | vs torch | regs | defines |")
    print("|---|---|---|---|---|---|---|")
    for r in ok[:12]:
        lib = f"{prepared.library_us / r['us']:.2f}x" if prepared.library_us else "-"
        tor = f"{prepared.torch_us / r['us']:.2f}x" if prepared.torch_us else "-"
        defs = " ".join(f"{k}={v}" for k, v in r["defines"].items())
        print(f"| {r['us']:.1f} | {r['gbps']:.0f} ({100 * r['gbps'] / copy:.1f}%) | {r['tflops']:.2f} | {lib} | {tor} "
              f"| {r['regs']} | {defs} |")
    bad = [r for r in rows if r["verdict"] != "OK"]
    for r in bad[:8]:
        print(f"- {r['verdict']} {r['config']}: {r['message'][:160]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--combos", type=int, default=24)
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--configs", action="append", default=[],
                    help="JSON {task: [{DEFINE: value}, ...]} evaluated first (repeatable)")
    a = ap.parse_args()
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    extra: dict[str, list[dict[str, int]]] = {}
    for path in a.configs:
        for task, configs in json.loads(Path(path).read_text()).items():
            extra.setdefault(task, []).extend(configs)
    child = Child(WorkerSpec(tuple(tasks.load(name) for name in a.tasks)))
    for name in a.tasks:
        explore(child, out, name, a.combos, a.trials, extra.get(name, []))


if __name__ == "__main__":
    main()
