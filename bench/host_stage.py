"""The GPU worker's host stage alone, no GPU needed: what `GpuEvaluator` does for a candidate
before it takes the GPU child (header check, guards, the candidate's own NVRTC compile and the
compiles of the configurations its tuning measures first), for COUNT distinct template
candidates of TASK, CALLS of them at once (eval.calls_per_worker) on THREADS compile threads, as
the worker runs them. If the rate printed is below what the GPU child sustains (one candidate
per its verify + tune + time), the host sets the pace.

    python bench/host_stage.py TASK [--count 24] [--calls 3] [--threads 16] [--trials 8]

Prints candidates per second (and per minute), the median and 90th-percentile latency of one
host stage, the process's CPU seconds per candidate (all threads), and the time spent choosing
the first tuning points (Optuna, under the GIL) and starting their compiles. The compile caches start
empty (the disk cache is not used here) and every candidate is distinct.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from fsr import candidate as cfmt
from fsr import tasks
from fsr.evaluate.compile import CompileService
from fsr.evaluate.evaluator import DEFAULT_ARCH, compiled_trials, static_stage, trial_compiles
from fsr.types import Candidate, Task


def distinct(task: Task, count: int, seed: int = 0) -> list[Candidate]:
    """Template candidates with seeded random switches (tunables at their defaults), all distinct."""
    template = cfmt.parse(task.template_source or task.baseline_source, task)
    rng = random.Random(seed)
    out: dict[str, Candidate] = {}
    for _ in range(50 * count):
        if len(out) == count:
            break
        cand = cfmt.with_defines(template, {f.name: rng.choice(f.values) for f in template.features})
        out.setdefault(cand.id, cand)
    return list(out.values())


def host_stage(cand: Candidate, task: Task, trials: int, pool: ThreadPoolExecutor,
               compiler: CompileService) -> tuple[float, float, int]:
    """One candidate's host stage as GpuEvaluator._evaluate runs it: (seconds, of which choosing
    the first points and starting their compiles, programs shipped)."""
    started = time.perf_counter()
    ahead = trial_compiles(cand, task, DEFAULT_ARCH, trials, 0, pool, compiler) if trials and cand.tunables else {}
    points_s = time.perf_counter() - started
    static = static_stage(cand, task, DEFAULT_ARCH, compiler)
    programs = compiled_trials(ahead) if static.verdict is None else ()
    return time.perf_counter() - started, points_s, len(programs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task")
    ap.add_argument("--count", type=int, default=24)
    ap.add_argument("--calls", type=int, default=3, help="candidates in their host stage at once")
    ap.add_argument("--threads", type=int, default=min(os.cpu_count() or 1, 16), help="compile threads")
    ap.add_argument("--trials", type=int, default=8)
    args = ap.parse_args()
    task = tasks.load(args.task)
    cands = distinct(task, args.count)
    pool = ThreadPoolExecutor(args.threads, thread_name_prefix="fsr-trials")
    compiler = CompileService()  # in this process, no disk cache: every compile is NVRTC's
    cpu0, wall0 = os.times(), time.perf_counter()
    with ThreadPoolExecutor(args.calls) as calls:
        results = list(calls.map(lambda c: host_stage(c, task, args.trials, pool, compiler), cands))
    wall = time.perf_counter() - wall0
    cpu = sum(os.times()[:2]) - sum(cpu0[:2])
    pool.shutdown()
    stages = sorted(r[0] for r in results)
    print(f"{args.task}: {len(cands)} distinct candidates, {args.calls} at once, {args.threads} compile threads, "
          f"{args.trials} trials, {os.cpu_count()} cores")
    print(f"  {len(cands) / wall:.2f} candidates/s ({60 * len(cands) / wall:.0f} per minute) over {wall:.1f} s; "
          f"host stage median {statistics.median(stages):.3f} s, p90 {stages[int(0.9 * (len(stages) - 1))]:.3f} s")
    print(f"  CPU {cpu / len(cands):.2f} s per candidate (all threads); first points and their compiles started in "
          f"{statistics.median(r[1] for r in results) * 1000:.0f} ms median; "
          f"programs shipped {statistics.median(r[2] for r in results):.0f} median")


if __name__ == "__main__":
    main()
