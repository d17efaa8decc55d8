"""`fsr prompt TASK [--parent FILE.cu] [--run DIR]`: the system and user messages a model would
be sent for a task, with fsr's token estimate and what the budget shortened. No GPU needed.

Without `--parent`, the first round's prompt (write the first kernel). With it, the prompt that
asks to improve FILE.cu; with `--run` too, FILE.cu's evaluation in that run's lineage (found by
the candidate's content hash) and the run's fastest correct kernel of the task come with it, as
in a campaign. The device is described, not measured: an H100 SXM's properties, and no measured
bandwidth or FLOP rate (a campaign's prompt has its worker's measured figures instead).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fsr import candidate as cfmt
from fsr import config as cfg_mod
from fsr import lineage, run_json, tasks
from fsr.commands import EXIT_OK, UsageError, non_empty
from fsr.files import read_input
from fsr.propose.base import ProposalRequest, Scored
from fsr.propose.features import detect
from fsr.propose.prompt import Prompt, build, estimate_tokens
from fsr.types import DeviceInfo, Evaluation, Task, Verdict

# What a prompt built away from a GPU says about the device: an H100 SXM's properties (CUDA's
# device attributes for that card), none of its measured ceilings.
DESCRIBED_DEVICE = DeviceInfo(name="NVIDIA H100 80GB HBM3", arch="sm_90", sm_count=132,
                              smem_per_block=48 * 1024, smem_per_block_optin=227 * 1024, smem_per_sm=228 * 1024,
                              l2_bytes=50 * 2**20, regs_per_sm=65536)


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("prompt", help="print the prompt a model would be sent for a task (no GPU needed)")
    parser.add_argument("task")
    parser.add_argument("--parent", type=non_empty("a .cu file"), metavar="FILE.cu", help="the kernel to improve (default: a first-round prompt)")
    parser.add_argument("--run", type=non_empty("a run directory"), metavar="DIR", help="a run directory: the parent's evaluation and the fastest "
                                                     "kernel so far come from its lineage")


def prompt_command(args: argparse.Namespace) -> int:
    config = cfg_mod.load(args.config)
    task = tasks.load(args.task, args.tasks_dir)
    if args.run and not args.parent:
        raise UsageError("--run needs --parent FILE.cu (the kernel whose evaluation it holds)")
    request = ProposalRequest(task, ())
    if args.parent:
        request = _improving(task, Path(args.parent), Path(args.run) if args.run else None)
    prompt = build(request, DESCRIBED_DEVICE, budget_tokens=config.llm.prompt_budget_tokens,
                   diagnostics=config.llm.diagnostics)
    print(render(prompt, config.llm.prompt_budget_tokens))
    return EXIT_OK


def render(prompt: Prompt, budget: int) -> str:
    """Both messages under headings with their sizes, then the total and what was shortened."""
    parts = [f"===== {role} message ({estimate_tokens(text)} tokens) =====\n{text.rstrip()}\n"
             for role, text in prompt.messages]
    shortened = ", ".join(prompt.shortened) or "nothing"
    parts.append(f"===== {prompt.tokens} tokens by fsr's estimate (characters / 4) of a budget of {budget} "
                 f"(llm.prompt_budget_tokens); shortened to fit: {shortened}. The GPU is described, not measured: "
                 f"an {DESCRIBED_DEVICE.name}'s properties, no measured rates (a campaign's workers measure theirs).")
    return "\n".join(parts)


def _improving(task: Task, path: Path, run: Path | None) -> ProposalRequest:
    """A request to improve the kernel in `path`, with what `run` knows of it and of the task."""
    source = read_input(path, "--parent")  # InputFileError: one line, exit 2
    parent = cfmt.parse(source, task)
    rows = _rows(run, task) if run else []
    evaluations = {row["candidate_id"]: row for row in rows}
    found = evaluations.get(parent.id)
    scored = Scored(parent, lineage.evaluation_from_row(found) if found else None, detect(parent))
    ok = [r for r in rows if r["verdict"] == Verdict.OK.value and r["median_us"] is not None]
    best = None
    if ok:
        fastest = min(ok, key=lambda r: r["median_us"])
        best = _scored(fastest) if fastest["candidate_id"] != parent.id else scored
    return ProposalRequest(task, (scored,), best=best)


def _rows(run: Path, task: Task) -> list[dict]:
    run_json.read_run_json(run)  # LineageError (one line, exit 2) where it is no run directory
    return [r for r in lineage.read(run).to_pylist() if r["task"] == task.name]


def _scored(row: dict) -> Scored:
    cand = lineage.candidate_from_row(row)
    evaluation: Evaluation = lineage.evaluation_from_row(row)
    return Scored(cand, evaluation, detect(cand))
