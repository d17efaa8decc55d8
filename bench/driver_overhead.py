"""The search driver's own time per evaluation, with many workers and no GPU.

A fake executor with `--workers` slots and a fixed evaluation time stands in for the GPUs; the
fake evaluator's latencies come from the candidates' features. The driver's time is what the
loop spends outside Executor.poll: asking islands, the policy, the offline proposer,
deduplication, submission, telling results and writing the lineage. Two figures: wall time less
time in poll (`CampaignSummary.driver_s`; inflated when other processes share the CPU), and the
driver thread's CPU time less CPU time in poll (the fake evaluator runs inside poll).

    python bench/driver_overhead.py [--workers 64] [--evaluations 3000] [--eval-s 0.05]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from fsr.config import SearchConfig
from fsr.lineage import LineageWriter
from fsr.propose.mutate import MutateProposer
from fsr.search.loop import run_campaign
from fsr.tasks import load
from fsr.testing.fakes import FakeEvaluator, FakeExecutor


class TimedExecutor(FakeExecutor):
    """Counts the driver thread's CPU seconds spent inside poll."""

    poll_cpu_s = 0.0

    def poll(self, timeout_s: float) -> list:
        t0 = time.thread_time()
        try:
            return super().poll(timeout_s)
        finally:
            self.poll_cpu_s += time.thread_time() - t0


def measure(workers: int, evaluations: int, eval_s: float, real_time: bool,
            lineage: bool) -> tuple[float, float, float, int]:
    """(driver wall ms, driver CPU ms per evaluation, busy fraction, evaluations) of one run."""
    task = load("softmax")
    evaluator = FakeEvaluator(effects={"VEC4": 2.0, "WARP_SHUFFLE": 1.3, "ONLINE": 1.2, "WARP_ROW": 1.1})
    executor = TimedExecutor(evaluator, slots=workers, eval_s=eval_s, real_time=real_time)
    config = SearchConfig(islands=4, max_evaluations=evaluations, seed=0)
    with tempfile.TemporaryDirectory() as run_dir:
        writer = LineageWriter(run_dir) if lineage else None
        cpu0 = time.thread_time()
        summary = run_campaign([task], executor, MutateProposer(), config, writer)
        cpu_ms = 1000 * (time.thread_time() - cpu0 - executor.poll_cpu_s) / max(1, summary.evaluations)
        if writer is not None:
            writer.close()
    return summary.driver_ms_per_evaluation, cpu_ms, executor.workers().busy_fraction, summary.evaluations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--evaluations", type=int, default=3000)
    parser.add_argument("--eval-s", type=float, default=0.05, help="seconds per evaluation (fixed)")
    args = parser.parse_args()
    for real_time, lineage in ((True, True), (True, False), (False, True)):
        ms, cpu_ms, busy, n = measure(args.workers, args.evaluations, args.eval_s, real_time, lineage)
        clock = f"real clock, {args.eval_s * 1000:.0f} ms/eval" if real_time else "virtual clock"
        print(f"{args.workers} workers, {n} evaluations, {clock}, lineage {'on' if lineage else 'off'}: "
              f"driver {ms:.2f} ms wall / {cpu_ms:.2f} ms CPU per evaluation, workers busy {busy:.0%}")


if __name__ == "__main__":
    main()
