"""A worker's fixed cost per task: what the first evaluation of each task pays on a fresh
evaluator (benchmark inputs and float64 references, uploads, library and baseline timing), with
the GPU child's host threads at 1 (what Ray's OMP_NUM_THREADS=1 gives an actor without CPUs),
at a share of the host's cores, and at that share with every task warmed (built from the
child's start, as `fsr run` does for a campaign's tasks); tasks are evaluated one after another
right after the child starts, as a campaign's first candidates arrive.

    python bench/setup_cost.py [THREADS]     (default: the host's cores / its GPUs)
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time

from fsr import candidate, tasks
from fsr.config import Config
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import WorkerSpec


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="    %(message)s")
    gpus = max(1, len([d for d in os.listdir("/dev") if d.startswith("nvidia") and d[6:].isdigit()]))
    share = int(sys.argv[1]) if len(sys.argv) > 1 else max(1, (os.cpu_count() or 1) // gpus)
    names = tasks.list_tasks()
    print("| host threads | warm | task | setup s (first evaluation) | wall s (first) | wall s (second) |")
    print("|---|---|---|---|---|---|")
    for threads, warm in ((1, ()), (share, ()), (share, tuple(names))):
        spec = WorkerSpec.of(Config(), [tasks.load(name) for name in names], warm=bool(warm))
        evaluator = GpuEvaluator(dataclasses.replace(spec, host_threads=threads))
        started = time.perf_counter()
        evaluator.device()
        print(f"    GPU child started in {time.perf_counter() - started:.2f} s", flush=True)
        for name in names:
            task = tasks.load(name)
            first = evaluator.evaluate(candidate.parse(task.baseline_source, task), tune=False)
            second = evaluator.evaluate(candidate.parse(task.baseline_source, task), tune=False)
            print(f"| {threads} | {'yes' if warm else 'no'} | {name} | {first.setup_s:.2f} | {first.wall_s:.2f} "
                  f"| {second.wall_s:.2f} |",
                  flush=True)
        evaluator.close()


if __name__ == "__main__":
    main()
