"""Where an evaluation's time goes inside the GPU child, function by function: the child runs in
this process (no sandbox), evaluates distinct template candidates of a task with default tuning,
under cProfile; prints the stage times and the functions with the largest cumulative time.
As in a worker, the trial programs the tuning measures first are compiled before the candidate
reaches the child (trial_plan.trial_compiles) and shipped with the request. Also prints, per
candidate, the tuning stage split into program loads and compile waits, small-size checks,
launch set-up and timed samples (wall seconds, measured around those calls).

    python bench/throughput_profile.py TASK [COUNT]
"""

from __future__ import annotations

import cProfile
import pstats
import random
import statistics
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

from fsr import candidate as cfmt
from fsr import tasks
from fsr.config import TuneConfig
from fsr.evaluate.gpu import child as child_module
from fsr.evaluate.gpu import timing, tuning
from fsr.evaluate.gpu.child import Child
from fsr.evaluate.trial_plan import compiled_trials, trial_compiles
from fsr.evaluate.wire import EvalRequest
from fsr.types import Candidate, WorkerSpec


def candidates(task_name: str, count: int) -> list[Candidate]:
    """Distinct candidates: the feature template with random switches (seeded)."""
    task = tasks.load(task_name)
    template = cfmt.parse(task.template_source or task.baseline_source, task)
    rng = random.Random(0)
    out: list[Candidate] = []
    seen: set[str] = set()
    while len(out) < count and len(seen) < 4 * count + 8:
        values = {f.name: rng.choice(f.values) for f in template.features}
        cand = cfmt.with_defines(template, values)
        if cand.id not in seen:
            seen.add(cand.id)
            out.append(cand)
    return out


SPLIT: dict[str, float] = defaultdict(float)


def timed_calls(owner: object, name: str, label: str) -> None:
    """Wrap `owner.name` so its wall time adds to SPLIT[label]."""
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            SPLIT[label] += time.perf_counter() - started

    setattr(owner, name, wrapper)


def main(task_name: str, count: int) -> None:
    child = Child(WorkerSpec((tasks.load(task_name),)))
    child.prepare(task_name)
    task = child.task(task_name)
    timed_calls(tuning.Trials, "program", "load")
    timed_calls(tuning.Trials, "_check", "check")
    timed_calls(child_module.TimedRuns, "__init__", "setup")
    timed_calls(timing, "sample_trial", "samples")
    pool = ThreadPoolExecutor(16)
    stages, walls = [], []
    profile = cProfile.Profile()
    for cand in candidates(task_name, count):
        compiled = child.compiles.compiler.compile(cand, child.device.arch)
        ahead = trial_compiles(cand, task, child.device.arch, TuneConfig().trials, TuneConfig().seed, pool,
                               child.compiles.compiler)
        programs = compiled_trials(ahead)
        SPLIT.clear()
        started = time.perf_counter()
        profile.enable()
        result = child.evaluate(EvalRequest(cand, compiled.cubin, compiled.lowered, TuneConfig().trials,
                                            programs=programs))
        profile.disable()
        walls.append(time.perf_counter() - started)
        stages.append((result.stages.verify_s, result.stages.tune_s, result.stages.bench_s))
        split = " ".join(f"{k} {v:.3f}" for k, v in sorted(SPLIT.items()))
        print(f"{cand.id} {result.verdict} wall {walls[-1]:.3f} s verify/tune/bench "
              f"{' '.join(f'{x:.3f}' for x in stages[-1])}; tune: {split}; trials {len(result.trials)} "
              f"shipped {len(programs)} median {statistics.median(result.samples_us) if result.samples_us else 0:.1f} us "
              f"samples {len(result.samples_us)}")
    print(f"{task_name}: {len(walls)} candidates, child wall median {statistics.median(walls):.3f} s; "
          f"verify {statistics.median(s[0] for s in stages):.3f}, tune {statistics.median(s[1] for s in stages):.3f}, "
          f"bench {statistics.median(s[2] for s in stages):.3f} s")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(45)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "softmax", int(sys.argv[2]) if len(sys.argv) > 2 else 12)
