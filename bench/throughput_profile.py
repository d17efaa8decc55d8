"""Where an evaluation's time goes inside the GPU child, function by function: the child runs in
this process (no sandbox), evaluates distinct template candidates of a task with default tuning,
under cProfile; prints the stage times and the functions with the largest cumulative time.

    python bench/throughput_profile.py TASK [COUNT]
"""

from __future__ import annotations

import cProfile
import pstats
import random
import statistics
import sys
import time

from fsr import candidate as cfmt
from fsr import tasks
from fsr.config import EvalConfig, TuneConfig
from fsr.evaluate.child import Child, EvalRequest
from fsr.evaluate.compile import compile_candidate


def candidates(task_name: str, count: int) -> list:
    """Distinct candidates: the feature template with random switches (seeded)."""
    task = tasks.load(task_name)
    template = cfmt.parse(task.template_source or task.baseline_source, task)
    rng = random.Random(0)
    out, seen = [], set()
    while len(out) < count and len(seen) < 4 * count + 8:
        values = {f.name: rng.choice(f.values) for f in template.features}
        cand = cfmt.with_defines(template, values)
        if cand.id not in seen:
            seen.add(cand.id)
            out.append(cand)
    return out


def main(task_name: str, count: int) -> None:
    child = Child(None, EvalConfig(), TuneConfig(), None)
    child.prepare(task_name)
    stages, walls = [], []
    profile = cProfile.Profile()
    for cand in candidates(task_name, count):
        compiled = compile_candidate(cand, child.device.arch)
        started = time.perf_counter()
        profile.enable()
        result = child.evaluate(EvalRequest(cand, compiled.cubin, compiled.lowered, TuneConfig().trials))
        profile.disable()
        walls.append(time.perf_counter() - started)
        stages.append(result.stages_s)
        print(f"{cand.id} {result.verdict} wall {walls[-1]:.3f} s verify/tune/bench {result.stages_s} "
              f"trials {len(result.trials)} median {statistics.median(result.samples_us) if result.samples_us else 0:.1f} us")
    print(f"{task_name}: {len(walls)} candidates, child wall median {statistics.median(walls):.3f} s; "
          f"verify {statistics.median(s[0] for s in stages):.3f}, tune {statistics.median(s[1] for s in stages):.3f}, "
          f"bench {statistics.median(s[2] for s in stages):.3f} s")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(45)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "softmax", int(sys.argv[2]) if len(sys.argv) > 2 else 12)
