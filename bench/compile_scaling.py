"""How NVRTC compiles of one task's template scale on this host: the same distinct configurations
compiled one after another and on a pool of threads, wall seconds each way.

    python bench/compile_scaling.py [TASK] [COUNT] [WORKERS]
"""

from __future__ import annotations

import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from fsr import candidate as cfmt
from fsr import tasks
from fsr.evaluate import compile as compiler
from fsr.types import Candidate

IN_PROCESS = compiler.CompileService()  # NVRTC in this process, as the threads measure it


def configurations(task_name: str, count: int) -> list[Candidate]:
    task = tasks.load(task_name)
    template = cfmt.parse(task.template_source or task.baseline_source, task)
    rng = random.Random(1)
    out: list[Candidate] = []
    seen: set[str] = set()
    while len(out) < count and len(seen) < 50 * count:
        values = {t.name: rng.choice(t.values) for t in template.tunables + template.features}
        cand = cfmt.with_defines(template, values)
        if cand.id not in seen:
            seen.add(cand.id)
            out.append(cand)
    return out


def tagged(cands: list[Candidate], tag: str) -> list[Candidate]:
    """The same configurations with a comment line added: new sources, so nothing comes from the
    in-memory compile cache of an earlier pass."""
    return [replace(c, source=f"{c.source}\n// {tag}\n") for c in cands]


def compile_one(cand: Candidate) -> float:
    started = time.perf_counter()
    try:
        IN_PROCESS.compile(cand, "sm_90")
    except compiler.CompileFailed:
        pass
    return time.perf_counter() - started


def main(task_name: str, count: int, workers: int) -> None:
    cands = configurations(task_name, count)
    compile_one(tagged(cands[:1], "warm-up")[0])  # NVRTC's first compile in a process loads and initialises it
    started = time.perf_counter()
    alone = [compile_one(c) for c in tagged(cands, "serial")]
    serial = time.perf_counter() - started
    with ThreadPoolExecutor(workers) as pool:
        started = time.perf_counter()
        threaded = list(pool.map(compile_one, tagged(cands, "threaded")))
        threads = time.perf_counter() - started
    print(f"{task_name}: {len(cands)} compiles; one after another {serial:.2f} s (each {sum(alone) / len(alone):.3f} s); "
          f"{workers} threads {threads:.2f} s (each {sum(threaded) / len(threaded):.3f} s, {serial / threads:.1f}x)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sgemm", int(sys.argv[2]) if len(sys.argv) > 2 else 16,
         int(sys.argv[3]) if len(sys.argv) > 3 else 8)
