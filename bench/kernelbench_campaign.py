"""A KernelBench campaign end to end: `fsr import` a level's problem files, then `fsr bench` over
the imported tasks against a scripted OpenAI-compatible endpoint, then `fsr report`.

The endpoint answers each request for the task the prompt names ("KernelBench problem
level1/19_ReLU.py"): for a task with a hand-written kernel in bench/kernelbench/<task>.cu, that
kernel (a new comment each time, so each answer is a new candidate); for every other task, in
turn, a kernel that writes zeros (WRONG; first, so that every task reaches the GPU and has its
PyTorch eager and torch.compile times), prose without code, host code (a main() that allocates
and launches: fsr refuses it) and a kernel that does not compile. The bench table then shows
fast_0/1/2 against PyTorch eager and torch.compile over all the level's tasks.

    python bench/kernelbench_campaign.py KERNELBENCH/level1 [--out DIR] [--evaluations 6] [--jobs N] [--max-bench-bytes 4GiB] [--comparators FILE] [-- fsr bench args]

Extra arguments after `--` go to `fsr bench` (e.g. `--local`, `--max-wall 900`). Prints the import
counts, the bench table, the verdicts per kind of answer, how many tasks had PyTorch eager and
torch.compile timed (`--comparators FILE`: each task's times as CSV) and the report page's path.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from fsr import lineage, run_json, tasks
from fsr.kernelbench.write import task_name
from fsr.report.comparators import recorded_figures, with_recorded
from fsr.testing.llm_server import ScriptedServer, fenced, reply

KERNELS = Path(__file__).resolve().parent / "kernelbench"
PROBLEM_RE = re.compile(r"KernelBench problem (level\d+/[^\s:]+\.py)")
PROSE = "The operation is best left to PyTorch; a custom kernel would not be faster here."
HOST_CODE = """#include <cuda_runtime.h>
int main() {
    float* d;
    cudaMalloc(&d, 1 << 20);
    cudaMemset(d, 0, 1 << 20);
    cudaFree(d);
    return 0;
}
"""


def zeros_kernel(task: tasks.Task, broken: bool = False) -> str:
    """A kernel of the right form that writes zeros to the task's first output (WRONG), or that
    does not compile."""
    out = task.outputs[0]
    count = " * ".join(f"({d.replace('//', '/')})" for d in out.shape) or "1"  # C: / floors, // comments
    body = "undefined_value" if broken else "0.0f"
    return f"""/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "zeros"
grid = ["cdiv({count}, BLOCK)"]
block = ["BLOCK"]
args = ["{out.name}", {", ".join(f'"{s}"' for s in task.size_names)}]
*/
extern "C" __global__ void zeros(float* fsr_y, {", ".join(f"int {s}" for s in task.size_names)}) {{
    const long long fsr_at = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (fsr_at < (long long){count.replace("(", "((long long)")}) fsr_y[fsr_at] = {body};
}}
"""


class KernelServer(ScriptedServer):
    """Answers each request for the task its prompt names (see the module docstring)."""

    def __enter__(self) -> KernelServer:
        super().__enter__()
        return self

    def __init__(self, tasks_dir: Path) -> None:
        super().__init__()
        self.tasks_dir = tasks_dir
        self.kinds: dict[str, str] = {}  # answer marker -> kind, to count verdicts by kind afterwards
        self._made = itertools.count()
        self._turn: Counter[str] = Counter()
        self._gen = threading.Lock()

    def answer(self, prompt: str) -> tuple[str, str]:
        found = PROBLEM_RE.search(prompt)
        if not found:
            return "prose", PROSE
        name = task_name(Path(found.group(1)))
        mark = f"// answer {next(self._made)}\n"
        own = KERNELS / f"{name}.cu"
        if own.exists():
            return "hand-written", fenced(own.read_text() + mark)
        task = tasks.load(str(self.tasks_dir / name))
        kind = ("wrong", "prose", "host code", "compile error")[self._turn[name] % 4]
        self._turn[name] += 1
        text = {"prose": PROSE, "host code": fenced(HOST_CODE + mark, lang="cpp"),
                "compile error": fenced(zeros_kernel(task, broken=True) + mark),
                "wrong": fenced(zeros_kernel(task) + mark)}[kind]
        return kind, text

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        prompt = "\n".join(m["content"] for m in body.get("messages", []) if m.get("role") == "user")
        with self._gen:
            answers = [self.answer(prompt) for _ in range(int(body.get("n") or 1))]
            for kind, text in answers:
                for mark in re.findall(r"// answer \d+", text):
                    self.kinds[mark] = kind
            self.push(reply(*(text for _, text in answers)))
            return super()._next(body, headers)


def comparators(frame: Any, imported: int, csv: Path | None, recorded: dict[str, dict[str, float]]) -> None:
    """How many of the imported tasks had PyTorch eager and torch.compile timed (beside a task's
    first candidates, or asked for after the campaign's last evaluation: `frame` holds run.json's
    figures too, fsr.report.comparators.with_recorded), and how the two compare (per task, the median over
    the workers that timed it; a task no evaluation reached has run.json's figures of it alone,
    `recorded`); each task's figures per worker to `csv`."""
    import pandas as pd

    cols = ["torch_us", "torch_compile_us", "torch_compile_s"]
    per_worker = frame.groupby(["task", "worker"])[cols].max()  # each worker times a task once
    per_task = per_worker.groupby("task").median()  # workers may differ (torch.compile's choices)
    unreached = {t: f for t, f in recorded.items() if t not in per_task.index}
    if unreached:
        per_task = pd.concat([per_task, pd.DataFrame.from_dict(unreached, orient="index").reindex(columns=cols)])
    timed = per_task.dropna(subset=["torch_us"])
    both = timed.dropna(subset=["torch_compile_us"])
    ratio = both["torch_us"] / both["torch_compile_us"]
    print(f"PyTorch eager timed for {len(timed)} of {imported} imported tasks, torch.compile for {len(both)}; "
          f"torch.compile faster than eager on {int((ratio > 1).sum())}, eager/compiled geomean "
          f"{float(np.exp(np.log(ratio).mean())) if len(ratio) else float('nan'):.2f}x; compile seconds "
          f"median {both['torch_compile_s'].median():.1f}, total {both['torch_compile_s'].sum():.0f}")
    if csv:
        per_worker.dropna(how="all").to_csv(csv)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("level", type=Path, help="a KernelBench level folder (its problem files)")
    parser.add_argument("--out", type=Path, help="where the tasks go (default: a temporary folder)")
    parser.add_argument("--evaluations", type=int, default=6, help="per task (default 6)")
    parser.add_argument("--jobs", type=int, default=1, help="files `fsr import` imports at once (default 1)")
    parser.add_argument("--max-bench-bytes", default="4GiB", help="fsr import's bound on a benchmark size's arguments")
    parser.add_argument("--comparators", type=Path, help="write each task's PyTorch eager and torch.compile times per worker here (CSV)")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    out = args.out or Path(tempfile.mkdtemp(prefix="fsr-kb-"))
    fsr = [sys.executable, "-m", "fsr"]
    imported = subprocess.run(fsr + ["import", str(args.level), "--out", str(out), "--jobs", str(args.jobs),
                                         "--max-bench-bytes", args.max_bench_bytes], capture_output=True, text=True)
    print(imported.stdout.splitlines()[-1] if imported.stdout else imported.stderr)
    runs = out.parent / f"{out.name}-runs"
    with KernelServer(out) as server:
        done = subprocess.run(fsr + ["--tasks-dir", str(out), "bench", "--model", "scripted", "--base-url",
                                     server.base_url, "--plain", "--max-evaluations", str(args.evaluations),
                                     "--runs-dir", str(runs), *extra],
                              capture_output=True, text=True, env={**os.environ, "OPENAI_API_KEY": "sk-scripted"})
        kinds = dict(server.kinds)
    print(done.stdout)
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        sys.exit(done.returncode)
    run_dir = max(runs.iterdir(), key=lambda p: p.stat().st_mtime)
    frame = lineage.read(run_dir).to_pandas()
    verdicts: Counter[tuple[str, str]] = Counter()
    for source, verdict in zip(frame["source"].fillna(""), frame["verdict"], strict=True):
        marks = re.findall(r"// answer \d+", source)
        verdicts[(kinds.get(marks[-1], "other") if marks else "other", verdict)] += 1
    print("| answer | verdict | evaluations |\n|---|---|---|")
    for (kind, verdict), n in sorted(verdicts.items()):
        print(f"| {kind} | {verdict} | {n} |")
    recorded = run_json.read_run_json(run_dir)
    print(f"requests: {len(server.bodies)}; run: {recorded.get('command')}")
    waited = (recorded.get("campaigns") or [{}])[-1].get("comparators")
    if waited:  # asked for after the last evaluation: what came back, what was left and why
        print(f"comparators asked for after the last evaluation: {waited['asked']} tasks, {len(waited['timed'])} came "
              f"back in {waited['spent_s']:.0f} s (bound {waited['bound_s']:.0f} s); left: {waited['left'] or 'none'}")
    comparators(with_recorded(frame, recorded), len(list(out.iterdir())), args.comparators, recorded_figures(recorded))
    page = subprocess.run(fsr + ["report", str(run_dir)], capture_output=True, text=True)
    print(page.stdout.strip() or page.stderr.strip())


if __name__ == "__main__":
    main()
