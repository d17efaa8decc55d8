"""`fsr export RUN_DIR TASK`: a run's best kernel of a task as a Python module that launches it.

    fsr export runs/<id> softmax --out softmax_fsr.py
    python -c "import softmax_fsr; softmax_fsr.check()"
    y = softmax_fsr.run(x)          # or softmax_fsr.run_torch(x) on CUDA tensors

The kernel is RUN_DIR/best/TASK.cu, which `fsr run` writes when a run ends (the task's fastest
correct kernel, its tuned values as the defaults). It is exported only when the run's lineage
holds an evaluation of that very kernel with verdict OK (the same code, tuned values, launches
and scratch): a file edited since, or put there by hand, is refused. The module is fsr.export's
(see docs/export.md).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from fsr import candidate as cfmt
from fsr import tasks
from fsr.commands import EXIT_OK, UsageError
from fsr.files import read_input
from fsr.types import Candidate, Task


def add_parser(sub: argparse._SubParsersAction) -> None:
    ex = sub.add_parser("export", help="a run's best kernel of a task as a Python module that launches it "
                                       "(CuPy, PyTorch) and checks it against the task's reference")
    ex.add_argument("run", metavar="RUN_DIR", help="a run directory with a best/ folder")
    ex.add_argument("task", metavar="TASK", help="a task of that run: its name, or its folder")
    ex.add_argument("--out", "-o", metavar="FILE", help="the module to write (default: RUN_DIR/best/TASK.py)")


def export_command(args: argparse.Namespace) -> int:
    from fsr.export.module import ExportError, Provenance, module_text

    run_dir = Path(args.run)
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such directory")
    best = run_dir / "best"
    if not best.is_dir():
        raise UsageError(f"{run_dir}: no best/ folder (fsr run writes each task's fastest correct kernel "
                         "there when the run ends)")
    task = tasks.load(args.task, args.tasks_dir)
    path = best / f"{task.name}.cu"
    if not path.is_file():
        held = ", ".join(sorted(p.stem for p in best.glob("*.cu"))) or "none"
        raise UsageError(f"{run_dir}: no best kernel of {task.name} (best/ holds kernels of: {held})")
    cand = cfmt.parse(read_input(path), task)  # InputFileError: one line, exit 2
    row = judged(run_dir, task, cand)
    if row is None:
        raise UsageError(f"{path}: no evaluation with verdict OK in {run_dir}'s lineage is of this kernel "
                         "(edited since the run wrote it?)")
    cand = dataclasses.replace(cand, compile_options=tuple(row["compile_options"] or ()))
    out = Path(args.out) if args.out else path.with_suffix(".py")
    if out.is_dir():
        raise UsageError(f"--out {out}: is a directory; give the module's file name")
    about = Provenance(str(path), row["candidate_id"], row["median_us"], row["device"], row["speedup"],
                       row["toolchain"])
    try:
        text = module_text(task, cand, about, module_name=_module_name(out))
    except ExportError as e:
        raise UsageError(str(e)) from None
    try:
        out.write_text(text)
    except OSError as e:
        raise UsageError(f"cannot write {out}: {e.strerror}") from None
    timing = f", {row['median_us']:.1f} us on {row['device'] or 'its GPU'}" if row["median_us"] else ""
    print(f"{out}: {task.name} candidate {row['candidate_id']}{timing}")
    return EXIT_OK



def _module_name(out: Path) -> str:
    """The name the module imports under: its file name, where that is a Python name."""
    return out.stem if out.stem.isidentifier() else "kernel"


def what_runs(cand: Candidate, defines: dict[str, int]) -> tuple[Any, ...]:
    """What decides the compiled program and its launches: the code below the header, every
    define's value, the launches and the scratch buffers (not the header's other tunable values
    or its comments, which `fsr run` rewrites when it writes best/)."""
    body = cfmt.HEADER_RE.sub("", cand.source, count=1).strip()
    return body, tuple(sorted(defines.items())), cand.launches, cand.scratch


def judged(run_dir: Path, task: Task, cand: Candidate) -> dict[str, Any] | None:
    """The fastest lineage row with verdict OK of this kernel as `fsr run` wrote it into best/
    (its tuned values as the defaults), or None."""
    import pyarrow.compute as pc

    from fsr import lineage

    want = what_runs(cand, dict(cand.resolved_defines()))
    table = lineage.read(run_dir)
    if table.num_rows:
        table = table.filter(pc.and_(pc.equal(table["task"], task.name), pc.equal(table["verdict"], "OK")))
    found = None
    for row in table.to_pylist():
        judged_cand = lineage.candidate_from_row(row)
        tuned = {d["name"]: d["value"] for d in row.get("tuned_defines") or []}
        if what_runs(judged_cand, dict(judged_cand.resolved_defines()) | tuned) != want:
            continue
        if found is None or (row["median_us"] or float("inf")) < (found["median_us"] or float("inf")):
            found = row
    return found
