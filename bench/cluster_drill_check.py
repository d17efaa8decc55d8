"""Checks for bench/cluster_drill.sh: wait until a campaign has used both GPUs, then judge its
lineage and terminal output after a node or a worker was killed under it.

    python3 bench/cluster_drill_check.py wait RUNS_DIR --rows K [--timeout S]
    python3 bench/cluster_drill_check.py check RUN_DIR --log LOG --killed-at EPOCH_S --evals N --rc RC

`wait` exits 0 once the run under RUNS_DIR has K rows from two workers (1 on timeout) and
prints the run directory. `check` prints one PASS/FAIL line per property and exits 1 if any fails.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

# What a lost worker looks like in a verdict, were one ever given for it: the executor's poison
# message or one of Ray's exception classes. A CRASH the GPU child reports says neither.
CLUSTER_FAULT = re.compile(r"was lost|ActorDiedError|ActorUnavailableError|RayActorError|NodeDiedError|"
                           r"ObjectLostError|OwnerDiedError|WorkerCrashedError|RaySystemError")
# Ray's own output, which must stay out of the terminal (it goes to the run's cluster.log).
RAY_NOISE = re.compile(r"\[state-dump\]|\(raylet|Raylet is terminated|\(pid=|\(GpuWorker|"
                       r"worker\.py:\d+|Traceback|A worker died or was killed")
NOTICE = re.compile(r"^fsr: worker \S+ lost: .*re-queued", re.M)


def rows(run_dir: Path) -> list[dict]:
    from fsr.lineage import read

    try:
        return read(run_dir).to_pylist()
    except Exception:  # no batch committed yet, or one being renamed into place
        return []


def wait(runs_dir: Path, want: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for run_dir in sorted(runs_dir.glob("*/")):
            got = rows(run_dir)
            if len(got) >= want and len({r["worker"] for r in got}) >= 2:
                print(run_dir)
                return 0
        time.sleep(0.5)
    print(f"timed out: fewer than {want} rows from two workers under {runs_dir}", file=sys.stderr)
    return 1


def check(run_dir: Path, log: Path, killed_at: float, evals: int, rc: int) -> int:
    table = rows(run_dir)
    text = log.read_text(errors="replace")
    ids = [r["candidate_id"] for r in table]
    before = {r["worker"] for r in table if r["finished_at"].timestamp() < killed_at}
    after = [r for r in table if r["finished_at"].timestamp() >= killed_at]
    blamed = [r for r in table if r["verdict"] in ("CRASH", "TIMEOUT") and CLUSTER_FAULT.search(r["message"])]
    noise = sorted({m.group(0) for m in RAY_NOISE.finditer(text)})
    verdicts: dict[str, int] = {}
    for r in table:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    checks = [
        ("fsr run exited 0", rc == 0, f"exit code {rc}"),
        ("every row exactly once", len(ids) == evals and len(set(ids)) == len(ids),
         f"{len(ids)} rows, {len(set(ids))} distinct, budget {evals}"),
        ("no CRASH/TIMEOUT caused by the kill", not blamed,
         f"{len(blamed)} blamed; verdicts {verdicts}" + (f"; first: {blamed[0]['message'][:200]}" if blamed else "")),
        ("both GPUs used before the kill", len(before) >= 2, f"workers before: {sorted(before)}"),
        ("evaluations went on after the kill", bool(after), f"{len(after)} rows after, by {sorted({r['worker'] for r in after})}"),
        ("one fsr line about the lost worker", bool(NOTICE.search(text)),
         "; ".join(m.group(0) for m in NOTICE.finditer(text))[:400] or "none"),
        ("terminal free of Ray's output", not noise, f"found {noise}" if noise else "clean"),
    ]
    for name, ok, detail in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
    passed = all(ok for _, ok, _ in checks)
    print(f"{'PASS' if passed else 'FAIL'}  {run_dir}")
    return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("wait")
    w.add_argument("runs_dir", type=Path)
    w.add_argument("--rows", type=int, required=True)
    w.add_argument("--timeout", type=float, default=240.0)
    c = sub.add_parser("check")
    c.add_argument("run_dir", type=Path)
    c.add_argument("--log", type=Path, required=True)
    c.add_argument("--killed-at", type=float, required=True)
    c.add_argument("--evals", type=int, required=True)
    c.add_argument("--rc", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "wait":
        return wait(args.runs_dir, args.rows, args.timeout)
    return check(args.run_dir, args.log, args.killed_at, args.evals, args.rc)


if __name__ == "__main__":
    sys.exit(main())
