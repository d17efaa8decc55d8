"""The scale gate: `fsr bench --plain` on the built-in suite from a cold start, and where each
worker's time went.

Runs `python -m fsr --config NOCACHE bench --plain ...` (compile and contents caches off) in `--root` (a checkout;
default this one) on the GPUs of `--gpus` (CUDA_VISIBLE_DEVICES), times the command from its start
to its end, then reads the run's lineage and prints: evaluations, wall, evaluations per
GPU-minute (evaluations / (GPUs x wall minutes); certifications are not evaluations: a tree that
certifies, as fsr bench does by default since 2026-11-29 and `-- --certify MODE` asks, counts
them apart with what they cost), per worker the evaluations, the seconds charged
to evaluations and the part of them spent waiting on setup (starting the GPU child, preparing a
task), the preparing share, and how many times each task was prepared on each worker (an
evaluation that paid for a preparation has setup_s > 0: the same reading for any tree, old or
new). The last line gives the figures of BENCHMARKS.md's scale table:

    scale: 1 GPU N evaluations per GPU-minute, preparing P%, at most K preparations of a task per worker

    python bench/scale.py --gpus 0 [--root DIR] [--out DIR] [--json FILE] [-- EXTRA fsr bench ARGS]

`--json FILE` writes the same figures as JSON (bench/gpu_check.py reads them): the label, the tree
(`--root`), GPUs, evaluations, wall seconds, evaluations per GPU-minute, the busiest worker's
preparing share, the most preparations of a task per worker, each worker's figures, the run
directory and the command's exit status.

Every cache is cold: fsr's compile and contents caches are off, and the libraries' own disk caches
(torch.compile's, Triton's, CuPy's, the CUDA driver's JIT cache) start empty in the run's folder and
are removed after it, so a gate run after another on the same machine pays what the first paid.

The suite is the 16 float32 tasks every figure of the gate was measured on (GATE_TASKS), unless the
extra arguments name tasks of their own (any argument not starting with "-" and not an option's
value is taken as one): the built-in suite has grown low-precision tasks since.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

GATE_TASKS = ("attention", "cross_entropy", "gelu", "gemv", "histogram", "jacobi2d", "layernorm", "maxpool2d",
              "nbody", "rmsnorm", "scan", "sgemm", "softmax", "spmv_csr", "sum_middle", "transpose")


def cold_config(root: Path) -> str:
    """A config that turns off every cache the tree at `root` has (an older tree, a ref, lacks the
    contents cache and refuses a key it does not know)."""
    caches = ["compile_cache_dir"]
    if "contents_cache_dir" in (root / "fsr" / "config.py").read_text():
        caches.append("contents_cache_dir")
    return "[eval]\n" + "".join(f'{key} = "off"\n' for key in caches)


# The disk caches of the libraries a campaign uses, outside fsr's config: torch.compile's (inductor's
# FX graphs and Triton's kernels, for the comparators), CuPy's kernels (the library comparators) and
# the CUDA driver's JIT cache. A gate after another on the same machine would find them filled and
# skip minutes of compiles the first paid for (on one H200, 2026-11-28, the same tree ran at 102.5 a
# GPU-minute first on a fresh machine and 138 second): each gate gets empty ones of its own.
LIBRARY_CACHES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton", "CUPY_CACHE_DIR": "cupy",
                  "CUDA_CACHE_PATH": "cuda"}


def cold_env(out: Path, gpus: str, root: Path) -> dict[str, str]:
    """The campaign's environment: its GPUs, the tree on the path, and empty library caches under `out`."""
    caches = {}
    for variable, name in LIBRARY_CACHES.items():
        folder = out / "caches" / name
        folder.mkdir(parents=True, exist_ok=True)
        caches[variable] = str(folder)
    return os.environ | {"CUDA_VISIBLE_DEVICES": gpus, "PYTHONPATH": f"{root}:{os.environ.get('PYTHONPATH', '')}"} | caches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="0", help="CUDA_VISIBLE_DEVICES for the campaign (default: 0)")
    parser.add_argument("--root", default=".", help="the checkout to run (default: this one)")
    parser.add_argument("--out", default="", help="where the run directory goes (default: a temporary one)")
    parser.add_argument("--label", default="", help="a name for this run in the printed lines")
    parser.add_argument("--json", default="", help="also write the figures to this file as JSON")
    parser.add_argument("extra", nargs="*", help="more `fsr bench` arguments, after --")
    args = parser.parse_args()
    root = Path(args.root).resolve()
    out = Path(args.out or tempfile.mkdtemp(prefix="fsr-scale-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    nocache = out / "nocache.toml"
    nocache.write_text(cold_config(root))
    gpus = len(args.gpus.split(","))
    env = cold_env(out, args.gpus, root)
    command = [sys.executable, "-m", "fsr", "--config", str(nocache), "bench", "--plain",
               "--runs-dir", str(out / "runs"), *args.extra, *([] if names_tasks(args.extra) else GATE_TASKS)]
    label = args.label or f"{root.name} on {gpus} GPU{'s' if gpus > 1 else ''}"
    print(f"[{label}] {' '.join(command)}", flush=True)
    started, started_epoch = time.monotonic(), time.time()
    done = subprocess.run(command, cwd=root, env=env)
    wall_s = time.monotonic() - started
    shutil.rmtree(out / "caches", ignore_errors=True)  # hundreds of MB, kept only for the campaign
    runs = sorted((out / "runs").glob("*/"))
    figures: dict[str, Any] = {"label": label, "root": str(root), "gpus": gpus, "wall_s": wall_s,
                               "returncode": done.returncode}
    if not runs:
        print(f"[{label}] no run directory (exit {done.returncode})")
        figures["error"] = "no run directory"
    else:
        figures |= report(label, runs[-1], gpus, wall_s)
        figures["cold_start"] = cold_start(label, runs[-1], started_epoch, wall_s)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    return done.returncode if runs else 1


def names_tasks(extra: list[str]) -> bool:
    """Whether `fsr bench` arguments name tasks: a word that is neither an option nor an option's
    value (every `fsr bench` option but --plain and --local takes one)."""
    flags = {"--plain", "--local", "-h", "--help"}
    words = iter(extra)
    for word in words:
        if not word.startswith("-"):
            return True
        if word not in flags and "=" not in word:
            next(words, None)  # the option's value
    return False


def report(label: str, run_dir: Path, gpus: int, wall_s: float) -> dict[str, Any]:
    """Print the campaign's figures from its lineage (see the module's docstring), read the way
    `fsr report` reads them (fsr.report.costs.worker_occupancy), and return them."""
    from fsr import lineage
    from fsr.report.costs import SETUP_PAID_S, paid_setup, worker_occupancy

    every = lineage.read_pandas(run_dir)
    certifying = every["tier"].fillna("screen") == "certify"
    frame = every[~certifying].copy()  # certifications are not evaluations: the rate counts screenings
    frame["setup_s"] = frame["setup_s"].fillna(0.0)
    rate = len(frame) / (gpus * wall_s / 60.0)
    failed = int((every["certified"] == False).sum())  # noqa: E712  (a nullable column)
    print(f"[{label}] {len(frame)} evaluations in {wall_s:.0f} s on {gpus} GPU(s): {rate:.1f} per GPU-minute "
          f"({run_dir}); {int(certifying.sum())} certifications beside them, {failed} failed")
    certified = certifications(label, every)
    workers = worker_occupancy(frame)
    workers["share"] = (workers["setup_s"] / workers["busy_s"]).where(workers["busy_s"] > 0, 0.0)
    for w in workers.itertuples():
        paid = frame[(frame["worker"] == w.worker) & (paid_setup(frame) > SETUP_PAID_S)].groupby("task").size()
        print(f"[{label}]   worker {w.worker}: {w.evaluations} evaluations, {w.busy_s:.0f} s charged, "
              f"{w.setup_s:.0f} s of it setup ({w.share:.0%}); preparations per task: "
              f"{', '.join(f'{t} {n}' for t, n in paid.sort_values(ascending=False).items()) or 'none'}")
    share = float(workers["share"].max()) if len(workers) else 0.0
    most = int(workers["preparations"].max()) if len(workers) else 0
    print(f"scale: {gpus} GPU{'s' if gpus > 1 else ''} {rate:.0f} evaluations per GPU-minute, preparing "
          f"{share:.0%} (the busiest worker), at most {most} preparations of a task per worker [{label}]")
    return {"evaluations": len(frame), "certifications": int(certifying.sum()), "uncertified": failed,
            "per_gpu_minute": rate, "preparing_share": share, "most_preparations": most,
            "run_dir": str(run_dir), "certified": certified,
            "workers": [{"worker": str(w.worker), "evaluations": int(w.evaluations), "busy_s": float(w.busy_s),
                         "setup_s": float(w.setup_s), "share": float(w.share)} for w in workers.itertuples()]}


def certifications(label: str, every: Any) -> dict[str, Any]:
    """Print what the campaign's certifications cost and which failed, per task at which set or
    check (`fsr report`'s certification table), how far each best held when certified, and each
    certification's fresh median over its control (the same load on the screening's own sets,
    `control_us`), and return the figures ({} where nothing was certified)."""
    from fsr.certification import certified_medians
    from fsr.report.certifications import certification_table

    table = certification_table(every)
    if table.empty:
        return {}
    certs = every[every["tier"] == "certify"]
    wall, setup = certs["wall_s"].fillna(0.0), certs["setup_s"].fillna(0.0)
    failed = {row.task: row.failed_at for row in table.itertuples() if row.failed}
    words = "; ".join(f"{task}: {at}" for task, at in failed.items()) or "none"
    print(f"[{label}]   certifications: {len(certs)} charged {wall.sum():.0f} s, {setup.sum():.0f} s of it waiting "
          f"for sets or preparing, median {wall.median():.2f} s each; failed: {words}")
    again = {task: certified / screened for task, (screened, certified) in certified_medians(every).items()}
    if again:  # each best as its certification timed it, over its screened median (the table's figure)
        ratios = sorted(again.values())
        slowest = max(again, key=again.__getitem__)
        print(f"[{label}]   the bests as certified over their screened medians: median {statistics.median(ratios):.3f}, "
              f"from {ratios[0]:.3f} to {ratios[-1]:.3f} ({slowest}), {len(ratios)} tasks")
    paired = certs[certs["median_us"].notna() & certs["control_us"].notna()] if "control_us" in certs else certs[:0]
    pairs = {str(row.candidate_id): (str(row.task), float(row.median_us / row.control_us))
             for row in paired.itertuples()}
    if pairs:  # every certification timed on the screening's own sets too: fresh over those, same load
        ratios = sorted(r for _, r in pairs.values())
        task, worst = max(pairs.values(), key=lambda p: p[1])
        print(f"[{label}]   fresh inputs over the screening's sets, timed in the same load: median "
              f"{statistics.median(ratios):.3f}, from {ratios[0]:.3f} to {worst:.3f} ({task}), {len(ratios)} certifications")
    return {"charged_s": float(wall.sum()), "waiting_s": float(setup.sum()), "median_s": float(wall.median()),
            "failed": failed, "certified_over_screened": again,
            "fresh_over_screening_sets": {cid: ratio for cid, (_, ratio) in pairs.items()}}


READY_LINE = re.compile(r"^(\S+ \S+),(\d+)\s.*worker (\S+) ready on .* after ([\d.]+) s")


def cold_start(label: str, run_dir: Path, started_epoch: float, wall_s: float) -> dict[str, Any]:
    """Print when the campaign got going, in seconds from the command's start (read from the
    lineage's finish times and the cluster log's "ready" lines), and return the figures: each
    worker ready; the first evaluation; every task's first evaluation; the 20th, 100th and last
    evaluation; the command's end; and the rate (a minute's evaluations) after the 100th."""
    import pandas as pd

    from fsr import lineage

    every = lineage.read_pandas(run_dir)
    frame = every[every["tier"].fillna("screen") != "certify"].copy()  # evaluations, as `report` counts them
    frame["at_s"] = (frame["finished_at"] - pd.Timestamp(started_epoch, unit="s", tz="UTC")).dt.total_seconds()
    finished = sorted(frame["at_s"].tolist())
    firsts = frame.groupby("task")["at_s"].min()
    marks: dict[str, Any] = {"ready_s": _ready_s(run_dir / "cluster.log", started_epoch),
                             "first_s": finished[0] if finished else None,
                             "every_task_s": float(firsts.max()) if len(firsts) else None,
                             "20th_s": finished[19] if len(finished) >= 20 else None,
                             "100th_s": finished[99] if len(finished) >= 100 else None,
                             "last_s": finished[-1] if finished else None, "end_s": wall_s}
    steady = len(finished) - 100
    marks["per_minute_after_100"] = steady / (finished[-1] - finished[99]) * 60 \
        if steady > 0 and finished[-1] > finished[99] else None
    text = ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v:.1f} s" for k, v in marks.items()
                     if k.endswith("_s") and k != "ready_s" and v is not None)
    ready = ", ".join(f"{w} ready {t:.1f} s" for w, t in marks["ready_s"].items()) or "no ready line"
    after = marks["per_minute_after_100"]
    print(f"[{label}]   cold start: {ready}; evaluations: {text}"
          + (f"; {after:.0f} evaluations a minute after the 100th" if after else ""))
    return marks


def _ready_s(cluster_log: Path, started_epoch: float) -> dict[str, float]:
    """Worker -> seconds from the command's start to its "ready" line in the cluster log (the
    log's times are the driver's local time)."""
    out: dict[str, float] = {}
    if not cluster_log.is_file():
        return out
    for line in cluster_log.read_text(errors="replace").splitlines():
        m = READY_LINE.match(line)
        if m:
            stamp = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
            out.setdefault(m.group(3), stamp - started_epoch)
    return out


if __name__ == "__main__":
    sys.exit(main())
