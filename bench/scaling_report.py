"""Where a campaign's time went, from its lineage (and, if given, nvidia-smi samples and the
`fsr run --plain` log): evaluations per minute over the lineage span, and per worker its
evaluations, its setup (GPU child start, task preparation: `setup_s`), its busy share of the
span (the evaluator's own wall time, `wall_s`), when it started its first evaluation and how long
it sat idle after its last.

    python bench/scaling_report.py RUN_DIR [--smi SMI_CSV] [--log RUN_LOG] [--label L] [--base BASE_RUN_DIR]

Prints one Markdown table row (`--base`: the one-GPU run of the same campaign, for the scaling
columns: evaluations per minute, and occupancy times GPUs, which is the scaling at equal cost
per evaluation) and a line per worker. The lineage span runs from the first candidate submitted to the last result, so it
includes the workers' start-up: nothing is left out of the rate.
"""

from __future__ import annotations

import argparse
import collections
import re
from datetime import datetime
from pathlib import Path

from fsr import lineage


def smi_busy(path: Path) -> dict[str, str]:
    """Per GPU index: share of one-second samples with utilisation above 0, and the mean."""
    util: dict[str, list[int]] = collections.defaultdict(list)
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[2].endswith("%"):
            util[parts[1]].append(int(parts[2].rstrip(" %")))
    return {g: f"{sum(u > 0 for u in v) / len(v):.0%} busy, mean {sum(v) / len(v):.0f}%"
            for g, v in sorted(util.items()) if v}


def fsr_busy(path: Path) -> str:
    """The executor's busy fraction from the last progress line of an `fsr run --plain` log."""
    found = re.findall(r"gpu busy (\d+%)", path.read_text())
    return found[-1] if found else "?"


def evaluations(run_dir: str) -> list[dict]:
    rows = lineage.read(run_dir).to_pylist()
    if not rows:
        raise SystemExit(f"{run_dir}: no evaluations")
    return rows


def span_rate(rows: list[dict]) -> tuple[datetime, datetime, float, float]:
    """First submission, last result, the span between in seconds, evaluations per minute."""
    t0 = min(r["started_at"] or r["finished_at"] for r in rows)
    end = max(r["finished_at"] for r in rows)
    span = (end - t0).total_seconds()
    return t0, end, span, 60 * len(rows) / span


def occupancy_of(rows: list[dict], span: float) -> float:
    """Worker-seconds spent evaluating over worker-seconds of the span: how well the GPUs were
    kept fed, whatever the evaluations cost. Two runs of one campaign evaluate different
    candidates (results come back in another order), so their costs differ; the ratio of
    occupancies times GPUs is the scaling at equal cost per evaluation."""
    workers = {r["worker"] for r in rows}
    return sum(r["wall_s"] for r in rows) / (span * len(workers))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--smi", type=Path)
    ap.add_argument("--log", type=Path)
    ap.add_argument("--label", default="")
    ap.add_argument("--base", help="the one-GPU run directory of the same campaign")
    args = ap.parse_args()
    rows = evaluations(args.run_dir)
    t0, end, span, rate = span_rate(rows)
    by_worker: dict[str, list[dict]] = collections.defaultdict(list)
    for r in rows:
        by_worker[r["worker"]].append(r)
    occupancy = occupancy_of(rows, span)
    scaling = equal = ""
    if args.base:
        base = evaluations(args.base)
        _, _, base_span, base_rate = span_rate(base)
        scaling = f"{rate / base_rate:.2f}x"
        equal = f"{occupancy * len(by_worker) / occupancy_of(base, base_span):.2f}x"
    per = " / ".join(str(len(v)) for _, v in sorted(by_worker.items()))
    busy = fsr_busy(args.log) if args.log else ""
    smi = "; ".join(f"gpu{g} {b}" for g, b in smi_busy(args.smi).items()) if args.smi else ""
    print(f"| {args.label} | {len(by_worker)} | {len(rows)} | {span:.0f} | {rate:.1f} | {scaling} | {occupancy:.0%} "
          f"| {equal} | {per} | {busy} | {smi} |")
    for name, evs in sorted(by_worker.items()):
        evs.sort(key=lambda r: r["finished_at"])
        first_start = (evs[0]["finished_at"] - t0).total_seconds() - evs[0]["wall_s"]
        idle_end = (end - evs[-1]["finished_at"]).total_seconds()
        work = sum(r["wall_s"] for r in evs)
        setup = sum(r["setup_s"] or 0.0 for r in evs)
        tasks = collections.Counter(r["task"] for r in evs)
        print(f"    {name}: {len(evs)} evaluations ({', '.join(f'{t} {n}' for t, n in sorted(tasks.items()))}); "
              f"first evaluation began at {first_start:.1f} s; setup {setup:.1f} s; evaluating "
              f"{work:.0f} s = {work / span:.0%} of the span; idle for the last {idle_end:.1f} s")


if __name__ == "__main__":
    main()
