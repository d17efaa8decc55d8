"""Driver cost of the Ray layer with many GPU workers, on a machine without GPUs.

An embedded Ray instance declares `--workers` fake GPUs; RayExecutor starts one worker actor on
each, running a test evaluator that sleeps a fixed `--eval-s` per candidate. The driver keeps
every worker busy, either with a plain submit/poll loop (`--loop simple`: the executor's own
cost) or with the real search loop and the offline mutator (`--loop search`: everything the
driver does per evaluation). Measured over a window after all workers are up and warm:

  evaluations/s       finished evaluations per wall second (ideal: workers / eval-s)
  busy fraction       worker-seconds evaluating / worker-seconds alive, as the workers report it
  driver CPU per eval time.process_time() of the driver process (Ray's client threads included)
                      per finished evaluation; the target is < 5 ms

    python bench/cluster_overhead.py [--workers 64] [--eval-s 0.05] [--seconds 20] [--loop simple]

The worker processes share the machine's cores with the driver, so on a small machine the
throughput is bounded by the workers' own Ray overhead, not by the driver: read driver CPU per
evaluation as the figure that carries over to a real cluster.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from dataclasses import replace

from cluster.executor import RayExecutor
from cluster.start import connect
from cluster.testing import MarkedEvaluatorFactory
from fsr.execute.base import WorkerStats
from fsr.testing.fakes import softmax_variants
from fsr.types import Candidate


def busy_between(before: list[WorkerStats], after: list[WorkerStats]) -> float:
    busy = sum(a.busy_s - b.busy_s for a, b in zip(after, before, strict=True))
    alive = sum(a.alive_s - b.alive_s for a, b in zip(after, before, strict=True))
    return busy / alive if alive > 0 else 0.0


def simple_loop(ex: RayExecutor, cands: itertools.count, base: Candidate, seconds: float) -> int:
    """Keep every slot full for `seconds`; returns the number of evaluations that came back."""
    done = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(ex.free_slots()):
            ex.submit(replace(base, source=f"{base.source}\n// {next(cands)}\n"))
        done += len(ex.poll(0.1))
    return done


def search_loop(ex: RayExecutor, evaluations: int) -> int:
    from fsr.config import SearchConfig
    from fsr.propose.mutate import MutateProposer
    from fsr.search.loop import run_campaign
    from fsr.tasks import load

    summary = run_campaign([load("softmax")], ex, MutateProposer(),
                           SearchConfig(islands=4, max_evaluations=evaluations, seed=0))
    print(f"search stopped: {summary.stopped_by}")
    return summary.evaluations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--eval-s", type=float, default=0.05, help="seconds per evaluation (fixed)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window (simple loop)")
    parser.add_argument("--loop", choices=("simple", "search"), default="simple")
    args = parser.parse_args()

    t0 = time.monotonic()
    connect(None, num_gpus=args.workers)
    # Reported latencies depend on a candidate's features (as in bench/driver_overhead.py), so
    # the search loop has gradients to follow; the time a worker spends is always --eval-s.
    effects = (("VEC4", 2.0), ("WARP_SHUFFLE", 1.3), ("ONLINE", 1.2), ("WARP_ROW", 1.1))
    ex = RayExecutor(MarkedEvaluatorFactory(latency_s=args.eval_s, effects=effects), num_workers=args.workers)
    ready = len(ex.workers(wait_s=900.0).devices)
    print(f"{ready} workers ready in {time.monotonic() - t0:.0f} s on {os.cpu_count()} CPU cores")
    base, cands = softmax_variants(1)[0], itertools.count()
    simple_loop(ex, cands, base, 3.0)  # warm-up: first calls, lazily imported modules

    before, wall0, cpu0 = list(ex.workers().stats), time.monotonic(), time.process_time()
    if args.loop == "simple":
        done = simple_loop(ex, cands, base, args.seconds)
    else:
        done = search_loop(ex, int(args.seconds * args.workers / args.eval_s))
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    busy = busy_between(before, list(ex.workers().stats))
    ex.close()

    ideal = args.workers / args.eval_s
    print(f"{args.workers} workers x {args.eval_s * 1000:.0f} ms, {args.loop} loop, {wall:.1f} s: "
          f"{done} evaluations, {done / wall:.0f} evaluations/s (ideal {ideal:.0f}), "
          f"busy fraction {busy:.3f}, driver CPU {1000 * cpu / max(done, 1):.2f} ms per evaluation")


if __name__ == "__main__":
    main()
