"""Scaling with identical work: the candidates of a recorded run, evaluated again (tuned with the
same seed, so the same trials) on every GPU this process sees, through the Ray executor and real
GPU evaluators. Two runs of a search campaign evaluate different candidates, whose costs differ
several-fold (compile and tuning); replaying one list removes that, leaving what the GPU count
changes: the executor, Ray, the workers' start-up and setup, and the host they share.

    CUDA_VISIBLE_DEVICES=0   python bench/replay_scaling.py RUN_DIR [--out REPLAY_DIR]
    CUDA_VISIBLE_DEVICES=0,1 python bench/replay_scaling.py RUN_DIR [--out REPLAY_DIR]
    CUDA_VISIBLE_DEVICES=0,1 python bench/replay_scaling.py --generate softmax=150 --generate sgemm=150

`--generate TASK=COUNT` replays a list made here instead of a recorded one, with no campaign to
record first: COUNT distinct template candidates of TASK with seeded random switches (as
bench/host_stage.py makes them), the tasks interleaved, at default settings (`--config FILE` to
change them). The same arguments give the same list; `--list` prints it and exits (no GPU).

Prints the wall time from the first submission to the last result (workers' start-up
included), evaluations per minute, each worker's count and busy fraction. `--out` writes the
replay's own lineage there (stage times per evaluation, workers), for `fsr report` (its Workers
table: each worker's occupancy) or a side-by-side look at the recorded run. Compiles are part of the work, so the workers start
with an empty compile cache (a temporary folder, removed after); `--warm-cache` keeps the
recorded config's (by default the node's, ~/.cache/fsr/compile).

Also printed: the rate after set-up (from the moment every worker has returned its first
result to the last result), where the workers' start-up, the same on one GPU as on two, is left
out. Where the host's cores set the pace (compiles), two workers share them: to see what the GPU
count alone changes, run the one-GPU replay on the two-GPU share of the cores (for example
`taskset -c 0-15` on a 32-core host) as well as on all of them.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import shutil
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime

from cluster.executor import RayExecutor
from cluster.start import connect
from fsr import config as cfg_mod
from fsr import lineage, run_json, tasks
from fsr.types import WorkerSpec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", nargs="?", help="a recorded run whose candidates are replayed")
    ap.add_argument("--generate", action="append", default=[], metavar="TASK=COUNT",
                    help="replay COUNT seeded template candidates of TASK instead (repeatable)")
    ap.add_argument("--config", help="with --generate: the config file (default: the defaults)")
    ap.add_argument("--list", action="store_true", help="print the candidates and exit")
    ap.add_argument("--out", help="write the replay's lineage to this directory")
    ap.add_argument("--warm-cache", action="store_true", help="keep the recorded config's compile cache")
    args = ap.parse_args()
    if bool(args.run_dir) == bool(args.generate):
        ap.error("give a recorded RUN_DIR or --generate TASK=COUNT, not both")
    if args.generate:
        candidates, config = generated(args.generate), cfg_mod.load(args.config)
    else:
        rows = sorted(lineage.read(args.run_dir).to_pylist(), key=lambda r: r["finished_at"])
        candidates = [lineage.candidate_from_row(r) for r in rows]
        config = cfg_mod.from_dict(run_json.read_run_json(args.run_dir).get("config", {}))
    if args.list:
        for c in candidates:
            print(c.task, c.id, " ".join(f"{k}={v}" for k, v in c.resolved_defines()))
        return
    by_id = {c.id: c for c in candidates}
    cache = None if args.warm_cache else tempfile.mkdtemp(prefix="fsr-compile-cache-")
    if cache:
        config = dataclasses.replace(config, eval=dataclasses.replace(config.eval, compile_cache_dir=cache))
    names = sorted({c.task for c in candidates})
    if args.out:
        run_json.write_run_json(args.out, cfg_mod.to_dict(config),
                               {"tasks": names, "replay_of": args.run_dir or " ".join(args.generate)})
    writer = lineage.LineageWriter(args.out) if args.out else None
    connect()
    started = time.perf_counter()
    executor = RayExecutor.from_config(WorkerSpec.of(config, [tasks.load(n) for n in names], warm=True))
    verdicts: Counter[str] = Counter()
    submitted: dict[str, datetime] = {}
    first_result: dict[str, float] = {}  # worker -> when its first result came
    finished: list[float] = []
    try:
        queue = list(reversed(candidates))
        done = 0
        while done < len(candidates):
            while queue and executor.free_slots() > 0:
                submitted[queue[-1].id] = datetime.now(UTC)
                executor.submit(queue.pop())
            for ev in executor.poll(1.0):
                verdicts[str(ev.verdict)] += 1
                done += 1
                now = time.perf_counter() - started
                finished.append(now)
                first_result.setdefault(ev.worker, now)
                if writer is not None:
                    writer.append(by_id[ev.candidate_id], ev, started_at=submitted[ev.candidate_id], finished_at=datetime.now(UTC))
        wall = time.perf_counter() - started
        stats = list(executor.workers().stats)
    finally:
        executor.close()
        if writer is not None:
            writer.close()
        if cache:
            shutil.rmtree(cache, ignore_errors=True)
    print(f"{len(candidates)} candidates of {', '.join(names)} on {len(stats)} GPU(s): {wall:.1f} s, "
          f"{60 * len(candidates) / wall:.1f} evaluations per minute; verdicts {dict(verdicts)}")
    set_up = max(first_result.values(), default=0.0)
    after = [t for t in finished if t > set_up]
    if after and wall > set_up:
        print(f"after set-up ({set_up:.1f} s, when every worker had returned a result): {len(after)} evaluations "
              f"in {wall - set_up:.1f} s, {60 * len(after) / (wall - set_up):.1f} per minute")
    for w in stats:
        print(f"  {w.name} ({w.device}): {w.evaluations} evaluations, busy {w.busy_s:.0f} s of {w.alive_s:.0f} s alive")


def generated(specs: list[str]) -> list:
    """The `--generate` list: each TASK=COUNT's distinct seeded template candidates, the tasks
    taken in turn (one of each, then the next of each, ...), as a campaign over them mixes them."""
    from host_stage import distinct  # bench/ is this script's folder

    from fsr import tasks

    lists = []
    for spec in specs:
        name, _, count = spec.partition("=")
        if not count.isdigit() or int(count) < 1:
            raise SystemExit(f"--generate {spec}: expected TASK=COUNT with COUNT a positive integer")
        try:
            task = tasks.load(name)
        except tasks.TaskError as e:
            raise SystemExit(f"--generate {spec}: {e}") from None
        lists.append(distinct(task, int(count)))
    return [c for row in itertools.zip_longest(*lists) for c in row if c is not None]


if __name__ == "__main__":
    main()
