"""`fsr run softmax` against the scripted OpenAI-compatible server, with real compilation,
checking and timing on the local GPU, for both strategies (islands and fsr).

The server (fsr.testing.llm_server, on 127.0.0.1) answers from a fixed script that mixes kernels
that do not compile, wrong kernels, good and faster kernels, prose with several code blocks, an
empty reply and a 429 with Retry-After; each kernel carries a distinct comment so that every
reply is a new candidate. Prints, per strategy, the verdict counts, the best latency and the
tokens from the run's lineage.

    python bench/llm_scripted.py [evaluations]
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from fsr import lineage
from fsr.testing.llm_server import (
    COMPILE_ERROR_KERNEL,
    EMPTY,
    FAST_KERNEL,
    GOOD_KERNEL,
    WRONG_KERNEL,
    ScriptedServer,
    Status,
    fenced,
    prose_with_blocks,
    reply,
)


def script(rounds: int) -> list:
    out: list = []
    for i in range(rounds):
        tag = f"\n// scripted variant {i}\n"
        out += [reply(fenced(COMPILE_ERROR_KERNEL + tag)), reply(fenced(WRONG_KERNEL + tag)),
                reply(fenced(GOOD_KERNEL + tag)), reply(prose_with_blocks().replace("```\nIt should", tag + "```\nIt should")),
                reply(fenced(FAST_KERNEL + tag))]
        if i % 4 == 1:
            out += [Status(429, "slow down", retry_after="1"), EMPTY]
    return out


def run(strategy: str, evaluations: int, runs_dir: Path) -> None:
    with ScriptedServer(script(4 * evaluations)) as server:
        cmd = [sys.executable, "-m", "fsr", "run", "softmax", "--local", "--plain", "--model", "scripted",
               "--base-url", server.base_url, "--strategy", strategy, "--depth", "6",
               "--max-evaluations", str(evaluations), "--tune-trials", "4", "--runs-dir", str(runs_dir)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                              env={**os.environ, "OPENAI_API_KEY": "sk-scripted-secret"})
        print(done.stderr[-1500:])
        requests = len(server.bodies)
    run_dir = max(runs_dir.iterdir(), key=lambda p: p.stat().st_mtime)
    rows = lineage.read(run_dir).to_pylist()
    ok = [r for r in rows if r["verdict"] == "OK" and r["median_us"]]
    best = min(ok, key=lambda r: r["median_us"]) if ok else None
    verdicts = ", ".join(f"{k} {v}" for k, v in Counter(r["verdict"] for r in rows).most_common())
    prompt = sum(r["prompt_tokens"] or 0 for r in rows)
    completion = sum(r["completion_tokens"] or 0 for r in rows)
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and b"sk-scripted-secret" in p.read_bytes()]
    best_text = f"{best['median_us']:.1f} us ({best['move'] or best['proposer']})" if best else "none"
    leak_text = f"key found in {leaked}" if leaked else "no"
    print(f"| {strategy} | {len(rows)} | {verdicts} | {best_text} | {prompt} / {completion} | {requests} "
          f"| {leak_text} |")


def main(evaluations: int) -> None:
    runs_dir = Path("runs-scripted")
    runs_dir.mkdir(exist_ok=True)
    print("| strategy | evaluations | verdicts | best | prompt / completion tokens | requests | API key in run dir |")
    print("|---|---|---|---|---|---|---|")
    for strategy in ("islands", "fsr"):
        run(strategy, evaluations, runs_dir)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 16)
