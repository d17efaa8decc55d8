"""`fsr prompt TASK [--parent FILE.cu] [--run DIR] [--device NAME]`: the system and user messages
a model would be sent for a task, with fsr's token estimate and what the budget shortened. No GPU
needed.

Without `--parent`, the first round's prompt (write the first kernel). With it, the prompt that
asks to improve FILE.cu; with `--run` too, FILE.cu's evaluation in that run's lineage (found by
the candidate's content hash, or as the run's best/ export of it) and the run's fastest correct
kernel of the task come with it, as in a campaign.

The GPU paragraph is the one a campaign's prompt has: a card as its worker measured it, read
from run.json's `devices`: `--run`'s (the first, or the one `--device` names), or with `--device`
alone the newest run under `--runs-dir` that measured a card of that name. With neither, no card
was measured, and the prompt has no GPU paragraph (the footer says so).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fsr import candidate as cfmt
from fsr import certification, lineage, run_json, tasks
from fsr import config as cfg_mod
from fsr.commands import EXIT_OK, UsageError, non_empty
from fsr.files import read_input
from fsr.propose.base import ProposalRequest, Scored
from fsr.propose.features import detect
from fsr.propose.prompt import Prompt, build, estimate_tokens
from fsr.types import Candidate, DeviceInfo, Evaluation, Task, Verdict

NO_DEVICE = ("No GPU was measured for this prompt, so it has no GPU paragraph (a campaign's prompt describes the "
             "card its worker measured): --run RUN_DIR or --device NAME gives one.")


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("prompt", help="print the prompt a model would be sent for a task (no GPU needed)")
    parser.add_argument("task")
    parser.add_argument("--parent", type=non_empty("a .cu file"), metavar="FILE.cu",
                        help="the kernel to improve (default: a first-round prompt)")
    parser.add_argument("--run", type=non_empty("a run directory"), metavar="DIR",
                        help="a run directory: its measured GPU; with --parent, the parent's evaluation and the "
                             "fastest kernel so far from its lineage")
    parser.add_argument("--device", type=non_empty("part of a GPU's name, e.g. H200"), metavar="NAME",
                        help="the GPU (part of its name, e.g. H200) as a run measured it: --run's, else the newest "
                             "under --runs-dir")
    parser.add_argument("--runs-dir", type=non_empty("a folder"), default="runs",
                        help="where --device looks for runs (default: runs/)")


def prompt_command(args: argparse.Namespace) -> int:
    config = cfg_mod.load(args.config)
    task = tasks.load(args.task, args.tasks_dir)
    device, said = measured_device(Path(args.run) if args.run else None, args.device, Path(args.runs_dir))
    request = ProposalRequest(task, ())
    if args.parent:
        request = _improving(task, Path(args.parent), Path(args.run) if args.run else None)
    prompt = build(request, device, budget_tokens=config.llm.prompt_budget_tokens,
                   diagnostics=config.llm.diagnostics)
    print(render(prompt, config.llm.prompt_budget_tokens, said))
    return EXIT_OK


def measured_device(run: Path | None, name: str | None, runs_dir: Path) -> tuple[DeviceInfo | None, str]:
    """The GPU the prompt describes, as a run measured it, and a sentence saying where it comes
    from (or that none was measured). Bad input (no such run, no such card): UsageError."""
    if run is not None:
        devices = run_json.read_devices(run)  # LineageError (one line) where it is no run directory
        if not devices:
            return None, f"{run} records no measured GPU (its run.json's devices is empty): no GPU paragraph."
        chosen = _named(devices, name)
        if chosen is None:
            raise UsageError(f"--device {name}: {run} measured {', '.join(sorted({d.name for d in devices}))} only")
        return chosen, f"The GPU is {chosen.name} as {run} measured it."
    if name is None:
        return None, NO_DEVICE
    runs = sorted((d for d in runs_dir.iterdir() if (d / "run.json").is_file()), reverse=True) \
        if runs_dir.is_dir() else []
    for found in runs:  # run ids begin with their start time: newest first
        try:
            chosen = _named(run_json.read_devices(found), name)
        except lineage.LineageError:
            continue  # a damaged run.json is not this command's business
        if chosen is not None:
            return chosen, f"The GPU is {chosen.name} as {found} measured it."
    raise UsageError(f"--device {name}: no run under {runs_dir} measured a GPU of that name; "
                     "--run RUN_DIR names a campaign's run")


def _named(devices: list[DeviceInfo], name: str | None) -> DeviceInfo | None:
    """The first device whose name holds `name` (any case); the first of all without a name."""
    if name is None:
        return devices[0] if devices else None
    return next((d for d in devices if name.strip().casefold() in d.name.casefold()), None)


def render(prompt: Prompt, budget: int, device: str = NO_DEVICE) -> str:
    """Both messages under headings with their sizes, then the total and what was shortened."""
    parts = [f"===== {role} message ({estimate_tokens(text)} tokens) =====\n{text.rstrip()}\n"
             for role, text in prompt.messages]
    shortened = "; ".join(prompt.cuts) or "nothing"
    parts.append(f"===== {prompt.tokens} tokens by fsr's estimate (characters / 4) of a budget of {budget} "
                 f"(llm.prompt_budget_tokens); shortened to fit: {shortened}. {device}")
    return "\n".join(parts)


def _improving(task: Task, path: Path, run: Path | None) -> ProposalRequest:
    """A request to improve the kernel in `path`, with what `run` knows of it and of the task.
    The kernel is printed once: where it is also the run's fastest, it is the fastest too."""
    source = read_input(path, "--parent")  # InputFileError: one line, exit 2
    parent = cfmt.parse(source, task)
    rows = _rows(run, task) if run else []
    found = _row_of(parent, rows)
    scored = Scored(parent, lineage.evaluation_from_row(found) if found else None, detect(parent))
    ok = [r for r in rows if r["verdict"] == Verdict.OK.value and r["median_us"] is not None]
    best = None
    if ok:
        fastest = min(ok, key=lambda r: r["median_us"])
        best = scored if found is not None and fastest["candidate_id"] == found["candidate_id"] else _scored(fastest)
    return ProposalRequest(task, (scored,), best=best)


def _row_of(parent: Candidate, rows: list[dict]) -> dict | None:
    """The lineage row of the kernel `parent`: by its content hash, else the row whose kernel, with
    its tuned values made the defaults, is `parent`'s text (what `fsr run` writes to best/)."""
    by_id = {row["candidate_id"]: row for row in rows}
    if parent.id in by_id:
        return by_id[parent.id]
    text = parent.source.strip()
    for row in rows:
        cand = lineage.candidate_from_row(row)
        tuned = tuple((d["name"], d["value"]) for d in row.get("tuned_defines") or [])
        if cfmt.export(cand, tuned or cand.resolved_defines()).strip() == text:
            return row
    return None


def _rows(run: Path, task: Task) -> list[dict]:
    """The task's evaluations in the run's lineage (a certification row re-judges one of them: not
    a kernel of its own)."""
    run_json.read_run_json(run)  # LineageError (one line, exit 2) where it is no run directory
    return [r for r in certification.screenings(lineage.read(run).to_pylist()) if r["task"] == task.name]


def _scored(row: dict) -> Scored:
    cand = lineage.candidate_from_row(row)
    evaluation: Evaluation = lineage.evaluation_from_row(row)
    return Scored(cand, evaluation, detect(cand))
