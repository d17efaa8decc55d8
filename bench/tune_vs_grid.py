"""Tuning against the exhaustive grid, per task feature template, on the local GPU.

For each task: the template with the given features on (default: every feature at its default)
is tuned twice in the same warm evaluator: once with a trial budget that covers the whole space
(the grid), once with a quarter of it (TPE). Prints each winner's values, its full-protocol
median, and how many configurations each needed to evaluate.

    python bench/tune_vs_grid.py softmax sgemm layernorm
    python bench/tune_vs_grid.py softmax:VEC4=1,WARP_SHUFFLE=1
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from fsr import candidate, tasks
from fsr.config import Config, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.tune import space_size
from fsr.types import WorkerSpec


def template(spec: str):
    name, _, feats = spec.partition(":")
    task = tasks.load(name)
    if not task.template_source:
        raise SystemExit(f"task {name} has no template.cu")
    cand = candidate.parse(task.template_source, task)
    values = {k: int(v) for k, v in (kv.split("=") for kv in feats.split(",") if kv)}
    return task, candidate.with_defines(cand, values) if values else cand


def tune_once(evaluator: GpuEvaluator, cand, trials: int, seed: int):
    evaluator.spec = replace(evaluator.spec, tune=replace(evaluator.spec.tune, trials=trials, seed=seed))
    evaluator.sandbox.spec = evaluator.spec
    evaluator.sandbox.kill()  # the child reads its tuning config at start
    started = time.perf_counter()
    result = evaluator.evaluate(cand, tune=True)
    return result, time.perf_counter() - started


def main(specs: list[str]) -> None:
    print("| task | features | space | grid best (values, median us, evaluations) | tuned best "
          "(values, median us, evaluations) | tuned / grid | tuning wall s (grid, tuned) |")
    print("|---|---|---|---|---|---|---|")
    for spec in specs:
        task, cand = template(spec)
        space = space_size(cand.tunables)
        evaluator = GpuEvaluator(WorkerSpec.of(Config(tune=TuneConfig(trials=space, time_budget_s=900.0)), [task]))
        try:
            grid, grid_s = tune_once(evaluator, cand, space, 0)
            tuned, tuned_s = tune_once(evaluator, cand, max(space // 4, 1), 0)
        finally:
            evaluator.close()
        feats = ",".join(f"{k}={v}" for k, v in cand.resolved_defines() if k in {f.name for f in cand.features})
        cells = []
        for r in (grid, tuned):
            tunable = {t.name for t in cand.tunables}
            vals = " ".join(f"{k}={v}" for k, v in r.tuned_defines if k in tunable)
            med = f"{r.timing.median_us:.1f}" if r.timing else str(r.verdict)
            evals = sum(1 for t in r.trials if not t.cached)
            cells.append(f"{vals}, {med}, {evals}")
        ratio = (tuned.timing.median_us / grid.timing.median_us) if grid.timing and tuned.timing else float("nan")
        print(f"| {task.name} | {feats} | {space} | {cells[0]} | {cells[1]} | {ratio:.3f} | {grid_s:.1f}, {tuned_s:.1f} |",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or tasks.list_tasks())
