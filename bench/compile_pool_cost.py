"""What one more compile process costs a GPU worker, no GPU needed: a `CompilePool` of PROCESSES
processes compiles that many distinct template candidates of TASK at once (each process starts
on its first compile), then as many again on the warm processes; printed are the first and the
warm compile latencies and each process's resident memory, private (RssAnon: what another
process adds) and shared with the others (RssFile: NVRTC's library, in the page cache once).

    python bench/compile_pool_cost.py [TASK] [--processes 2]

A GPU worker runs two pools (its own, and its GPU child's for the tuning trials the worker did
not ship); a pool starts a process only when that many compiles run at once (LIFO), so the
second pool costs what this prints per process, for the compiles it runs at once.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from host_stage import distinct  # bench/ is this script's folder

from fsr import tasks
from fsr.evaluate.compile import BASE_OPTIONS, full_source
from fsr.evaluate.compile_pool import CompilePool, Limits
from fsr.evaluate.evaluator import DEFAULT_ARCH


def _memory_kib(pid: int) -> dict[str, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) for k in ("RssAnon", "RssFile")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", nargs="?", default="softmax")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    task = tasks.load(args.task)
    cands = distinct(task, 2 * args.processes)
    options = (f"--gpu-architecture={DEFAULT_ARCH}",) + BASE_OPTIONS
    pool = CompilePool(args.processes, Limits(60.0, 4 << 30))

    def one(cand) -> float:  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        kernels = tuple(dict.fromkeys(launch.kernel for launch in cand.launches))
        pool.compile(full_source(cand), kernels, options + cand.compile_options)
        return time.perf_counter() - started

    try:
        with ThreadPoolExecutor(args.processes) as threads:
            first = list(threads.map(one, cands[:args.processes]))
            warm = list(threads.map(one, cands[args.processes:]))
        print(f"{args.task}: {args.processes} compile processes; first compile (process start included) "
              f"median {statistics.median(first):.3f} s, warm compile median {statistics.median(warm):.3f} s")
        for pid in pool.pids():
            mem = _memory_kib(pid)
            print(f"  process {pid}: private {mem['RssAnon'] / 1024:.0f} MiB, shared {mem['RssFile'] / 1024:.0f} MiB")
    finally:
        pool.close()


if __name__ == "__main__":
    main()
