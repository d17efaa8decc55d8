"""Does a model keep the GPU busy? `fsr run` on one task against a scripted OpenAI-compatible
endpoint that answers every request with valid, distinct kernels after a fixed latency (10 s by
default, +-30% jitter), with the default config; then the same campaign with the offline
proposer. Prints the table of issue 29: evaluations a minute (the whole run, and from the first
answer on), the GPU worker's busy fraction (as `fsr run` reports it), requests in flight (time
average and most, as the endpoint saw them).

    python bench/pace_llm.py [--task softmax] [--latency 10] [--wall 120] [-- fsr run args ...]

Two runs of `--wall` seconds each, plus start-up: about five minutes with the defaults. Extra
arguments after `--` go to both `fsr run`s (e.g. `--local`, `--gpus 1`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from fsr import lineage
from fsr.testing.llm_server import GOOD_KERNEL, ScriptedServer, Slow, fenced, reply

ThreadingHTTPServer.request_queue_size = 1024  # the default backlog (5) stalls hundreds of connections


class ModelServer(ScriptedServer):
    """Every request answered with new distinct kernels (as many as `n` asks) after `latency_s`
    times a uniform jitter; each request's (arrival, seconds) kept for the in-flight figures."""

    def __init__(self, latency_s: float, jitter: float) -> None:
        super().__init__()
        self.latency_s, self.jitter = latency_s, jitter
        self.spans: list[tuple[float, float]] = []
        self._made = 0
        self._rng = random.Random(0)
        self._gen = threading.Lock()
        self._httpd.handle_error = lambda *_: None  # type: ignore[method-assign]  # abandoned at the end

    def __enter__(self) -> ModelServer:
        super().__enter__()
        return self

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        with self._gen:
            n = int(body.get("n") or 1)
            texts = [fenced(GOOD_KERNEL + f"// scripted variant {self._made + i}\n") for i in range(n)]
            self._made += n
            seconds = self.latency_s * self._rng.uniform(1 - self.jitter, 1 + self.jitter)
            self.spans.append((time.monotonic(), seconds))
        self.push(Slow(seconds, reply(*texts)))
        return super()._next(body, headers)

    def in_flight(self) -> tuple[float, int]:
        """Requests in flight: the time average over the requests' span, and the most at once."""
        if not self.spans:
            return 0.0, 0
        events = sorted([(t, 1) for t, _ in self.spans] + [(t + s, -1) for t, s in self.spans])
        level = most = 0
        for _, step in events:
            level += step
            most = max(most, level)
        duration = events[-1][0] - events[0][0]
        return sum(s for _, s in self.spans) / duration if duration > 0 else 0.0, most


def run(cmd: list[str], runs_dir: Path) -> dict[str, Any]:
    """One `fsr run`; its figures from its output, run.json and lineage."""
    done = subprocess.run(cmd + ["--runs-dir", str(runs_dir)], capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "OPENAI_API_KEY": "sk-scripted"})
    if done.returncode != 0:
        sys.exit(f"fsr run failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    run_dir = max(runs_dir.iterdir(), key=lambda p: p.stat().st_mtime)
    campaign = (json.loads((run_dir / "run.json").read_text()).get("campaigns") or [{}])[-1]
    rows = lineage.read(run_dir).to_pylist()
    finished = sorted(r["finished_at"] for r in rows if r.get("finished_at") is not None)
    model_rows = sorted(r["finished_at"] for r in rows if r["proposer"] not in ("seed",) and r.get("finished_at"))
    steady = (len(model_rows) - 1) / max(1e-9, (model_rows[-1] - model_rows[0]).total_seconds()) * 60 \
        if len(model_rows) > 1 else 0.0
    busy = re.findall(r"busy (\d+)% of", done.stderr)  # fsr run's summary, one line per worker
    pace = re.findall(r"model latency .*", done.stdout)
    return {"evaluations": len(finished), "per_min": 60 * len(finished) / max(1e-9, campaign.get("wall_s", 0.0)),
            "steady_per_min": steady, "busy": f"{busy[-1]}%" if busy else "-", "pace": pace[-1] if pace else "",
            "run_dir": str(run_dir)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="softmax")
    ap.add_argument("--latency", type=float, default=10.0, help="the model's seconds per reply")
    ap.add_argument("--jitter", type=float, default=0.3, help="latency varies by this fraction either way")
    ap.add_argument("--wall", type=float, default=120.0, help="seconds of each run")
    ap.add_argument("rest", nargs="*", help="after --: arguments for both fsr runs")
    args = ap.parse_args()
    base = [sys.executable, "-m", "fsr", "run", args.task, "--plain", "--max-wall", str(args.wall),
            "--max-evaluations", "1000000", *args.rest]
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.strip().splitlines()
    with tempfile.TemporaryDirectory() as tmp:
        with ModelServer(args.latency, args.jitter) as server:
            model = run(base + ["--model", "scripted", "--base-url", server.base_url], Path(tmp) / "model")
            mean, most = server.in_flight()
        offline = run(base, Path(tmp) / "offline")
    print(f"\n{gpu[0] if gpu else 'unknown GPU'}, {datetime.now(UTC):%Y-%m-%d}, task {args.task}, model latency "
          f"{args.latency:g} s +-{args.jitter:.0%}, {args.wall:g} s a run\n")
    print("| config | evaluations a minute (whole run / from the first answer) | GPU worker busy | requests in flight |")
    print("|---|---|---|---|")
    print(f"| defaults (paced model) | {model['per_min']:.1f} / {model['steady_per_min']:.1f} | {model['busy']} "
          f"| {mean:.0f} on average, {most} at most |")
    print(f"| offline proposer | {offline['per_min']:.1f} / {offline['steady_per_min']:.1f} | {offline['busy']} | - |")
    ratio = model["steady_per_min"] / offline["steady_per_min"] if offline["steady_per_min"] else 0.0
    print(f"\nfrom the first answer on, the model run evaluates {ratio:.0%} of the offline rate")
    if model["pace"]:
        print(f"last pace line: {model['pace']}")


if __name__ == "__main__":
    main()
