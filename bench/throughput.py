"""Evaluation throughput of a real `fsr run` at default settings: evaluations per GPU-minute per
task, where each evaluation's wall time went (stages from the lineage), and the share of the
campaign's wall time the GPU spent running kernels (nvidia-smi's utilization.gpu, sampled every
100 ms, over the campaign once its worker was set up).

    python bench/throughput.py OUT_DIR LABEL EVALS_PER_TASK TASK [TASK ...] [--fsr-path DIR] [--separate] [--config FILE]
                                [--warm-cache]

Runs `python3 -m fsr run TASK ... --max-evaluations N --plain` (embedded Ray, one GPU, default
config) with DIR (e.g. an exported older fsr) first on its PYTHONPATH, else the inherited one; reads the
lineage with this checkout's reader (older lineages read too). Per task, evaluations per
GPU-minute = evaluations / (sum over them of wall_s - setup_s): the worker's time on the task,
the one-off start of the worker and preparation of each task left out (shown apart as setup).
With `--separate`, each task runs as a campaign of its own, and "per minute of span" counts the
evaluations that finished after the set-up did over the wall time from then to the last: the
GPU held by that task alone, nothing attributed. Prints a Markdown table and
writes OUT_DIR/LABEL.json and the lineage's per-evaluation figures to OUT_DIR/rows-LABEL.csv.
Compiles are part of what is measured, so each campaign starts with an empty compile cache of its
own (OUT_DIR/compile-cache-LABEL, removed after; the config passed is OUT_DIR/config-LABEL.toml);
`--warm-cache` keeps the config's cache (by default the node's, ~/.cache/fsr/compile).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

from fsr import lineage

STAGES = ("compile_s", "verify_s", "tune_s", "bench_s", "wall_s")
ROW_COLUMNS = ("task", "verdict", "started_at", "finished_at", "setup_s", *STAGES, "tune_trials")


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


def summarise(rows: list[dict], smi: Path) -> dict:
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
        span = warm_span(mine)
        if span is not None:
            out["tasks"][task]["per_minute_of_span"] = span[0] / (span[1] / 60)
            out["tasks"][task]["gpu_busy"] = gpu_busy(smi, span[2], span[3])
    span = warm_span(rows)
    if span is not None:
        out["span_s"] = span[1]
        out["per_gpu_minute_campaign"] = span[0] / (span[1] / 60)
        out["gpu_busy"] = gpu_busy(smi, span[2], span[3])
    return out


def warm_span(rows: list[dict]) -> tuple[int, float, datetime, datetime] | None:
    """From the moment the last evaluation that paid set-up (the worker's start, a task's inputs)
    finished to the last finish: how many evaluations finished in it, its seconds, start and end.
    (A call's started_at is when it was sent, so calls queued behind the set-up would otherwise
    count the set-up as theirs.)"""
    finished = sorted(r["finished_at"] for r in rows)
    setups = [r["finished_at"] for r in rows if (r["setup_s"] or 0.0) >= 0.05]
    start = max(setups) if setups else min(r["started_at"] or r["finished_at"] for r in rows)
    after = [f for f in finished if f > start]
    if len(after) < 2:
        return None
    return len(after), (after[-1] - start).total_seconds(), start, after[-1]


def cold_config(out: Path, label: str, config: str | None, fsr_path: str | None) -> tuple[str | None, Path | None]:
    """`config` with the compile cache pointed at an empty folder of this campaign's, written to
    OUT_DIR/config-LABEL.toml, and that folder; `config` as it is for an fsr without a disk cache."""
    fsr_config = Path(fsr_path or Path(__file__).resolve().parent.parent) / "fsr" / "config.py"
    if "compile_cache_dir" not in fsr_config.read_text():
        return config, None
    cache = (out / f"compile-cache-{label}").resolve()
    shutil.rmtree(cache, ignore_errors=True)
    data = tomllib.loads(Path(config).read_text()) if config else {}
    data.setdefault("eval", {})["compile_cache_dir"] = str(cache)
    path = out / f"config-{label}.toml"
    # Sections of scalars: a JSON string, number or boolean is the same value in TOML.
    path.write_text("".join(f"[{section}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())
                            for section, values in data.items()))
    return str(path), cache


def campaign(out: Path, label: str, evaluations: int, task_names: list[str], fsr_path: str | None,
             max_wall_s: float | None, config: str | None = None, warm_cache: bool = False) -> tuple[list[dict], str, int]:
    """Run one `fsr run` campaign; its lineage rows, the command and its exit code."""
    cache = None
    if not warm_cache:
        config, cache = cold_config(out, label, config, fsr_path)
    runs = out / f"runs-{label}"
    command = ["python3", "-m", "fsr", *(["--config", str(Path(config).resolve())] if config else []), "run",
               *task_names, "--max-evaluations", str(evaluations), "--plain", "--runs-dir", str(runs.resolve())]
    command += ["--max-wall", str(max_wall_s)] if max_wall_s else []
    env = dict(os.environ)
    if fsr_path:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(fsr_path).resolve()), env.get("PYTHONPATH", "")])
    try:
        with (out / f"log-{label}.txt").open("w") as log:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=600, env=env,
                                  cwd=fsr_path or None).returncode
    finally:
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)
    run_dir = next(runs.iterdir())
    # certifications are not evaluations (a lineage of an fsr before them has none): screenings only
    rows = [r for r in lineage.read(run_dir).to_pylist() if (r.get("tier") or "screen") != "certify"]
    return rows, " ".join(command), code


def main(out_dir: str, label: str, evaluations: int, task_names: list[str], fsr_path: str | None,
         max_wall_s: float | None = None, separate: bool = False, config: str | None = None,
         warm_cache: bool = False) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    smi_path = out / f"smi-{label}.csv"
    smi = sample_gpu(smi_path)
    started = time.perf_counter()
    groups = [[t] for t in task_names] if separate else [task_names]
    rows: list[dict] = []
    commands, codes = [], []
    for group in groups:
        got, command, code = campaign(out, f"{label}-{'-'.join(group)}" if separate else label, evaluations,
                                      group, fsr_path, max_wall_s, config, warm_cache)
        rows += got
        commands.append(command)
        codes.append(code)
    wall = time.perf_counter() - started
    if smi is not None:
        smi.terminate()
    with (out / f"rows-{label}.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(ROW_COLUMNS)
        writer.writerows([r.get(c) for c in ROW_COLUMNS] for r in rows)
    result = {"label": label, "commands": commands, "exit_codes": codes, "wall_s": wall, "separate": separate,
              "warm_cache": warm_cache,
              **summarise(rows, smi_path)}
    (out / f"{label}.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"{label}: {'; '.join(f'`{c}`' for c in commands)} exit {codes}, {wall:.0f} s; GPU busy "
          f"{100 * (result.get('gpu_busy') or 0):.0f}% of the warm span ({result.get('span_s', 0):.0f} s, "
          f"{result.get('per_gpu_minute_campaign', 0):.1f} evaluations per minute over it)")
    print("| task | evaluations | per GPU-minute | per minute of span | GPU busy | median wall s | compile | verify "
          "| tune | time + recheck | setup s | verdicts |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for task, t in result["tasks"].items():
        verdicts = ", ".join(f"{k} {v}" for k, v in t["verdicts"].items())
        span = f"{t['per_minute_of_span']:.1f}" if separate and "per_minute_of_span" in t else "-"
        busy = f"{100 * t['gpu_busy']:.0f}%" if separate and t.get("gpu_busy") is not None else "-"
        print(f"| {task} | {t['evaluations']} | {t['per_gpu_minute']:.1f} | {span} | {busy} | {t['median_wall_s']:.3f} "
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
    ap.add_argument("--separate", action="store_true", help="one campaign per task")
    ap.add_argument("--config", help="passed to fsr run")
    ap.add_argument("--warm-cache", action="store_true",
                    help="keep the config's compile cache instead of an empty one per campaign")
    a = ap.parse_args()
    main(a.out_dir, a.label, a.evaluations, a.tasks, a.fsr_path, a.max_wall, a.separate, a.config, a.warm_cache)
