"""Evaluation throughput of a real `fsr run` at default settings: evaluations per GPU-minute per
task, where each evaluation's wall time went (stages from the lineage), and the share of the
campaign's wall time the GPU spent running kernels (nvidia-smi's utilization.gpu, sampled every
100 ms, over the campaign once its worker was set up).

    python bench/throughput.py OUT_DIR LABEL EVALS_PER_TASK TASK [TASK ...] [--fsr-path DIR]

Runs `python3 -m fsr run TASK ... --max-evaluations N --plain` (embedded Ray, one GPU, default
config) with DIR (e.g. an exported older fsr) first on its PYTHONPATH, else the inherited one; reads the
lineage with this checkout's reader (older lineages read too). Per task, evaluations per
GPU-minute = evaluations / (sum over them of wall_s - setup_s): the worker's time on the task,
the one-off start of the worker and preparation of each task left out (shown apart as setup).
Prints a Markdown table and writes OUT_DIR/LABEL.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from fsr import lineage

STAGES = ("compile_s", "verify_s", "tune_s", "bench_s", "wall_s")


def sample_gpu(path: Path) -> subprocess.Popen | None:
    try:
        return subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,utilization.gpu",
                                 "--format=csv,noheader,nounits", "-lms", "100"],
                                stdout=path.open("w"), stderr=subprocess.DEVNULL)
    except OSError:
        return None


def gpu_busy(path: Path, start: datetime, end: datetime) -> float | None:
    """Mean utilization.gpu (percent of time a kernel ran) over [start, end] (UTC)."""
    local = datetime.now().astimezone().tzinfo
    values = []
    for row in csv.reader(path.open()):
        try:
            stamp = datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=local)
            if start <= stamp.astimezone(UTC) <= end:
                values.append(float(row[1]))
        except (ValueError, IndexError):
            continue
    return statistics.mean(values) / 100 if values else None


def summarise(run_dir: Path, smi: Path) -> dict:
    rows = lineage.read(run_dir).to_pylist()
    out: dict = {"tasks": {}, "evaluations": len(rows)}
    for task in sorted({r["task"] for r in rows}):
        mine = [r for r in rows if r["task"] == task]
        setup = sum(r["setup_s"] or 0.0 for r in mine)
        work = sum(r["wall_s"] for r in mine) - setup
        verdicts: dict[str, int] = {}
        for r in mine:
            verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
        out["tasks"][task] = {"evaluations": len(mine), "per_gpu_minute": len(mine) / (work / 60),
                              "setup_s": setup, "verdicts": verdicts,
                              **{f"median_{s}": statistics.median(r[s] for r in mine) for s in STAGES}}
    warm = [r for r in rows if (r["setup_s"] or 0.0) < 0.05]  # after the worker's and the tasks' set-up
    if warm:
        start = min(r["started_at"] or r["finished_at"] for r in warm)
        end = max(r["finished_at"] for r in rows)
        out["gpu_busy"] = gpu_busy(smi, start, end)
        out["span_s"] = (end - start).total_seconds()
        out["per_gpu_minute_campaign"] = len(warm) / (out["span_s"] / 60)
    return out


def main(out_dir: str, label: str, evaluations: int, task_names: list[str], fsr_path: str | None,
         max_wall_s: float | None = None) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    smi_path = out / f"smi-{label}.csv"
    smi = sample_gpu(smi_path)
    command = ["python3", "-m", "fsr", "run", *task_names, "--max-evaluations", str(evaluations), "--plain",
               "--runs-dir", str((out / f"runs-{label}").resolve())]
    command += ["--max-wall", str(max_wall_s)] if max_wall_s else []
    started = time.perf_counter()
    env = dict(os.environ)
    if fsr_path:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(fsr_path).resolve()), env.get("PYTHONPATH", "")])
    with (out / f"log-{label}.txt").open("w") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=600, env=env,
                              cwd=fsr_path or None).returncode
    wall = time.perf_counter() - started
    if smi is not None:
        smi.terminate()
    run_dir = next((out / f"runs-{label}").iterdir())
    result = {"label": label, "command": " ".join(command), "exit_code": code, "wall_s": wall,
              **summarise(run_dir, smi_path)}
    (out / f"{label}.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"{label}: `{result['command']}` exit {code}, {wall:.0f} s; GPU busy "
          f"{100 * (result.get('gpu_busy') or 0):.0f}% of the warm span ({result.get('span_s', 0):.0f} s, "
          f"{result.get('per_gpu_minute_campaign', 0):.1f} evaluations per minute over it)")
    print("| task | evaluations | per GPU-minute | median wall s | compile | verify | tune | time + recheck "
          "| setup s | verdicts |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for task, t in result["tasks"].items():
        verdicts = ", ".join(f"{k} {v}" for k, v in t["verdicts"].items())
        print(f"| {task} | {t['evaluations']} | {t['per_gpu_minute']:.1f} | {t['median_wall_s']:.3f} "
              f"| {t['median_compile_s']:.3f} | {t['median_verify_s']:.3f} | {t['median_tune_s']:.3f} "
              f"| {t['median_bench_s']:.3f} | {t['setup_s']:.1f} | {verdicts} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("label")
    ap.add_argument("evaluations", type=int)
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--fsr-path", help="directory holding the fsr (and tasks/) to run")
    ap.add_argument("--max-wall", type=float, help="passed to fsr run: stop the search after this many seconds")
    a = ap.parse_args()
    main(a.out_dir, a.label, a.evaluations, a.tasks, a.fsr_path, a.max_wall)
