"""Wall time of one evaluation once the evaluator is warm: compile + verify + time.

Each candidate is distinct (a different comment line gives a different content hash), so every
one is really compiled; the first evaluation, which starts the GPU child and prepares the task,
is excluded.

    python bench/eval_wall.py softmax 10
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time

from fsr import candidate, tasks
from fsr.config import Config, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import WorkerSpec


def main(task_name: str = "softmax", count: int = 10) -> None:
    task = tasks.load(task_name)
    base = candidate.parse(task.baseline_source, task)
    evaluator = GpuEvaluator(WorkerSpec.of(Config(tune=TuneConfig(trials=0)), [task]))
    try:
        started = time.perf_counter()
        first = evaluator.evaluate(base)
        print(f"cold: {time.perf_counter() - started:.2f} s ({first.verdict}; starts the child, prepares the task, "
              f"times the baseline)")
        walls, compiles = [], []
        for i in range(count):
            cand = dataclasses.replace(base, source=base.source + f"\n// variant {i} {time.time_ns()}\n")
            started = time.perf_counter()
            result = evaluator.evaluate(cand)
            walls.append(time.perf_counter() - started)
            compiles.append(result.compile_s)
            assert result.verdict.value == "OK" and result.timing is not None, result.message
        timing = result.timing
        assert timing is not None
        print(f"{task_name} baseline, {count} distinct candidates, warm evaluator on {evaluator.device().name}:")
        print(f"  wall per candidate: median {statistics.median(walls):.3f} s "
              f"(min {min(walls):.3f}, max {max(walls):.3f}); compile median {statistics.median(compiles):.3f} s; "
              f"median latency {timing.median_us:.1f} us, {len(timing.samples_us)} samples")
    finally:
        evaluator.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "softmax", int(sys.argv[2]) if len(sys.argv) > 2 else 10)
