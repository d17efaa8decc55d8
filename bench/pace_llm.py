"""Does a model keep the GPU busy? `fsr run` on one task against a scripted OpenAI-compatible
endpoint that answers every request with valid, distinct kernels after a fixed latency (10 s by
default, +-30% jitter), with the default config; then the same campaign with the offline
proposer. Prints the table of issue 29: evaluations a minute (the whole run, and from the first
answer on), the GPU worker busy (as `fsr run` reports it: since the worker was ready; and from
the lineage: the share of time a worker held a candidate, over the whole campaign and from the
first model candidate on), requests in flight (time average and most, as the endpoint saw them).

    python bench/pace_llm.py [--task softmax] [--latency 10] [--wall 120] [-- fsr run args ...]
    python bench/pace_llm.py --fake-gpu 0.58 [--latency 10] [--wall 80]   # no GPU: the CPU's fake

Two runs of `--wall` seconds each, plus start-up: about five minutes with the defaults. Extra
arguments after `--` go to both `fsr run`s (e.g. `--local`, `--gpus 1`). `--fake-gpu EVAL_S`
runs the paced campaign in this process on fake GPU workers instead (fsr.testing.fake_gpu:
EVAL_S seconds a candidate, one after another, `--calls-per-worker` held at once, the first
after `--startup` seconds), the same endpoint and default config; no offline run (fake workers
are always busy with it).
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

Span = tuple[str, float, float]  # worker, start, end (seconds on one clock)

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


def held(spans: list[Span], since: float, until: float) -> float:
    """The workers' share of [since, until] holding a candidate (the union of each worker's
    submit-to-result spans; with one candidate a worker, the time its GPU was not waiting)."""
    workers = sorted({w for w, _, _ in spans})
    covered = 0.0
    for worker in workers:
        reach = since
        for _, s, e in sorted(x for x in spans if x[0] == worker):
            s, e = max(s, reach), min(e, until)
            if e > s:
                covered, reach = covered + e - s, e
    return covered / (len(workers) * (until - since)) if workers and until > since else 0.0


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
    busy = re.findall(r"evaluating (\d+)%", done.stderr)  # fsr run's summary, one line per worker
    pace = re.findall(r"model latency .*", done.stdout)
    spans = [(r.get("worker") or "", r["started_at"].timestamp(), r["finished_at"].timestamp())
             for r in rows if r.get("started_at") and r.get("finished_at")]
    firsts = [r["started_at"].timestamp() for r in rows if r["proposer"] != "seed" and r.get("started_at")]
    end = max((e for _, _, e in spans), default=0.0)
    begin = end - campaign.get("wall_s", 0.0)
    return {"evaluations": len(finished), "per_min": 60 * len(finished) / max(1e-9, campaign.get("wall_s", 0.0)),
            "steady_per_min": steady, "busy": f"{busy[-1]}%" if busy else "-", "pace": pace[-1] if pace else "",
            "held": held(spans, begin, end), "held_after": held(spans, min(firsts), end) if firsts else 0.0,
            "run_dir": str(run_dir)}


def fake_run(args: argparse.Namespace, server: ModelServer) -> dict[str, Any]:
    """The paced campaign in this process, on fake GPU workers; the figures of `run`."""
    from fsr.config import LLMConfig, SearchConfig
    from fsr.propose.llm import LLMProposer
    from fsr.search.loop import run_campaign
    from fsr.search.pace import Ceilings
    from fsr.tasks import load
    from fsr.testing.fake_gpu import FakeGpuWorkers
    from fsr.testing.llm_server import StandInEvaluator

    llm = LLMConfig(model="scripted", base_url=server.base_url)
    proposer = LLMProposer(llm, device=StandInEvaluator().device())
    workers = FakeGpuWorkers(args.fake_workers, args.fake_gpu, args.calls_per_worker, args.startup)
    search = SearchConfig(max_evaluations=1_000_000, max_wall_s=args.wall)
    pace = Ceilings(llm.concurrency, llm.max_requests_per_minute, llm.max_tokens_per_minute)
    summary = run_campaign([load(args.task)], workers, proposer, search, pace=pace)
    end = time.monotonic()
    model = [(s, e) for c, s, e in workers.spans() if c.origin.proposer != "seed"]
    first = workers.first_proposed() or end
    wall = end - workers.started
    return {"evaluations": summary.evaluations, "per_min": 60 * summary.evaluations / wall,
            "steady_per_min": 60 * (len(model) - 1) / max(1e-9, model[-1][1] - model[0][1]) if len(model) > 1 else 0.0,
            "busy": f"{workers.busy(workers.ready_at(), end):.0%}", "held": workers.busy(workers.started, end),
            "held_after": workers.busy(first, end), "first_answer_s": first - workers.started,
            "pace": _pace_line(summary.progress.pace)}


def _pace_line(pace: Any) -> str:
    if pace is None:
        return ""
    return (f"model latency {pace.latency_p50_s or 0:.1f} s (p90 {pace.latency_p90_s or 0:.1f}), requests in flight "
            f"{pace.requests_in_flight}/{pace.target_in_flight}, proposals waiting {pace.proposals_waiting}, "
            f"workers waiting {pace.workers_waiting}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="softmax")
    ap.add_argument("--latency", type=float, default=10.0, help="the model's seconds per reply")
    ap.add_argument("--jitter", type=float, default=0.3, help="latency varies by this fraction either way")
    ap.add_argument("--wall", type=float, default=120.0, help="seconds of each run")
    ap.add_argument("--fake-gpu", type=float, default=0.0, metavar="EVAL_S",
                    help="no GPU: fake workers at EVAL_S seconds a candidate (see above)")
    ap.add_argument("--fake-workers", type=int, default=1, help="fake GPUs (with --fake-gpu)")
    ap.add_argument("--calls-per-worker", type=int, default=1,
                    help="candidates a fake GPU holds at once (with --fake-gpu; fsr run --local holds 1)")
    ap.add_argument("--startup", type=float, default=3.0, help="a fake GPU's seconds before its first evaluation")
    ap.add_argument("rest", nargs="*", help="after --: arguments for both fsr runs")
    args = ap.parse_args()
    offline: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        with ModelServer(args.latency, args.jitter) as server:
            if args.fake_gpu:
                model = fake_run(args, server)
            else:
                base = [sys.executable, "-m", "fsr", "run", args.task, "--plain", "--max-wall", str(args.wall),
                        "--max-evaluations", "1000000", *args.rest]
                model = run(base + ["--model", "scripted", "--base-url", server.base_url], Path(tmp) / "model")
            mean, most = server.in_flight()
        if not args.fake_gpu:
            offline = run(base, Path(tmp) / "offline")
    report(args, model, offline, mean, most)


def report(args: argparse.Namespace, model: dict[str, Any], offline: dict[str, Any] | None, mean: float,
           most: int) -> None:
    if args.fake_gpu:
        device = (f"{args.fake_workers} fake GPU(s) at {args.fake_gpu:g} s a candidate, {args.calls_per_worker} "
                  f"held at once, {args.startup:g} s start-up (CPU)")
    else:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True).stdout.strip().splitlines()
        device = gpu[0] if gpu else "unknown GPU"
    print(f"\n{device}, {datetime.now(UTC):%Y-%m-%d}, task {args.task}, model latency "
          f"{args.latency:g} s +-{args.jitter:.0%}, {args.wall:g} s a run\n")
    print("| config | evaluations a minute (whole run / from the first answer) | GPU worker busy (as reported) "
          "| worker held a candidate (whole run / from the first answer) | requests in flight |")
    print("|---|---|---|---|---|")
    rows = [("defaults (paced model)", model, f"{mean:.0f} on average, {most} at most")]
    rows += [("offline proposer", offline, "-")] if offline else []
    for name, r, flight in rows:
        print(f"| {name} | {r['per_min']:.1f} / {r['steady_per_min']:.1f} | {r['busy']} "
              f"| {r['held']:.0%} / {r['held_after']:.0%} | {flight} |")
    if offline and offline["steady_per_min"]:
        print(f"\nfrom the first answer on, the model run evaluates {model['steady_per_min'] / offline['steady_per_min']:.0%}"
              " of the offline rate")
    if "first_answer_s" in model:
        print(f"the first answer's candidate started {model['first_answer_s']:.1f} s into the run")
    if model["pace"]:
        print(f"last pace line: {model['pace']}")


if __name__ == "__main__":
    main()
