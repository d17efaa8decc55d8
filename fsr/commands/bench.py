"""`fsr bench`: the task suite as one campaign on every local GPU, then the table people quote.

The campaign is `fsr run`'s (fsr.commands.run: same executors, lineage and run directory) with
a budget that keeps the whole suite short: a per-task evaluation cap and a wall cap. Afterwards
each task's row comes from `fsr.report.tables.task_summary` (the figures `fsr report` shows) over
the rows that count (fsr.certification.counted: where the campaign certifies, certified results only);
the geometric means and KernelBench's fast_p come from the same module, so bench and report
agree (both add run.json's comparators, timed after the campaign's last evaluation, to the
lineage's: fsr.report.comparators.with_recorded); this module adds only bench.md / bench.json in
the run directory.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from fsr import certification, lineage, run_json
from fsr import tasks as tasks_mod
from fsr.commands import EXIT_OK, UsageError, config_option
from fsr.commands.run import add_model_arguments, add_search_arguments, add_where_arguments
from fsr.view import latency_text, speedup_text

DEFAULT_MAX_EVALUATIONS = 24  # per task: 16 tasks in about 5 minutes on one H200
DEFAULT_MAX_WALL_S = 420.0  # the whole campaign; the in-flight evaluations then finish
# Speedup columns of fsr.report.tables.task_summary with their names in the table and the JSON.
COMPARATORS = (("speedup_baseline", "baseline"), ("speedup_library", "library"), ("speedup_torch", "torch"),
               ("speedup_torch_compile", "torch_compile"), ("speedup_pytorch", "pytorch"))


def add_parser(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="run the task suite as one campaign; best kernels against "
                                         "baseline, library and PyTorch eager")
    bench.add_argument("tasks", nargs="*", help="task names or directories (default: every task in the tasks dir)")
    add_where_arguments(bench)
    budget = bench.add_argument_group("budget")
    budget.add_argument("--max-evaluations", type=config_option("search", "max_evaluations"),
                        default=DEFAULT_MAX_EVALUATIONS,
                        help=f"evaluations per task (default: {DEFAULT_MAX_EVALUATIONS})")
    budget.add_argument("--max-wall", type=config_option("search", "max_wall_s"), default=DEFAULT_MAX_WALL_S,
                        help=f"seconds the campaign starts evaluations for (default: {DEFAULT_MAX_WALL_S:.0f}); "
                             "those in flight then finish, and the certifications and the table follow")
    add_search_arguments(budget)
    add_model_arguments(bench)
    bench.add_argument("--plain", action="store_true", help="one progress line every few evaluations, no live view")


def bench_command(args: argparse.Namespace) -> int:
    """Run the campaign, then tabulate, write and print it; the exit code of `fsr run` otherwise."""
    from fsr.commands.run import run_campaign_args
    from fsr.report.comparators import library_names, recorded_figures, with_recorded

    _check_budget(args)
    names = list(args.tasks) or tasks_mod.list_tasks(args.tasks_dir)
    if not names:
        raise UsageError(f"no tasks in {tasks_mod.tasks_dir(args.tasks_dir)}")
    code, run_dir = run_campaign_args(_run_args(args, names))
    if code != EXIT_OK:
        return code
    recorded = run_json.read_run_json(run_dir)
    every, certifies = lineage.read_pandas(run_dir), certification.certifying(recorded)
    frame = with_recorded(certification.counted(every, certifies), recorded)  # comparators timed after the end
    again = certification.certified_medians(every) if certifies else {}
    rows = bench_rows(frame, recorded.get("tasks") or [], recorded_figures(recorded), library_names(recorded),
                      {task: certified for task, (_, certified) in again.items()})
    means = geomeans(rows)
    markdown = to_markdown(rows, means, run_dir, _provenance(recorded))
    (run_dir / "bench.md").write_text(markdown)
    (run_dir / "bench.json").write_text(json.dumps(to_json(rows, means, run_dir), indent=2) + "\n")
    print(markdown, end="")
    print(f"fsr: bench table in {run_dir}/bench.md and bench.json", file=sys.stderr)
    return EXIT_OK


def _run_args(args: argparse.Namespace, names: list[str]) -> argparse.Namespace:
    """`fsr run`'s arguments for this bench: its defaults (a fresh run of the offline search, or
    of the model a --config file names), overlaid with the bench's options and tasks."""
    from fsr.commands import run

    parser = argparse.ArgumentParser(add_help=False)
    run.add_parser(parser.add_subparsers(dest="command"))
    return argparse.Namespace(**(vars(parser.parse_args(["run"])) | vars(args) | {"tasks": names}))


def _check_budget(args: argparse.Namespace) -> None:
    if args.max_evaluations < 1:
        raise UsageError(f"--max-evaluations must be at least 1 (got {args.max_evaluations})")
    if not args.max_wall > 0:
        raise UsageError(f"--max-wall must be a positive number of seconds (got {args.max_wall})")


def bench_rows(frame: Any, order: list[str], recorded: dict[str, dict[str, float]] | None = None,
               libraries: dict[str, str] | None = None,
               certified: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """One dict per task (task_summary's columns, NaN as None), in `order` and then any other
    task of the lineage; a task of `order` the campaign never evaluated gets a row of Nones but
    for the comparator figures run.json keeps of it (`recorded`: timed after the last evaluation).
    `library`: what the task's library comparator is, where its task.toml names it (`libraries`),
    else None. `certified_us`: certification's own median of the best (`certified`, from
    fsr.certification.certified_medians), else None."""
    from fsr.report.tables import SUMMARY_COLUMNS, task_summary

    summary = task_summary(frame) if len(frame) else None
    found = {} if summary is None else {str(r["task"]): r for r in summary.to_dict("records")}
    names = list(dict.fromkeys(list(order) + sorted(found)))
    empty = dict.fromkeys(SUMMARY_COLUMNS) | {"evaluations": 0, "verdicts": ""}
    recorded = recorded or {}
    libraries = libraries or {}
    certified = certified or {}
    return [{k: _plain(v) for k, v in (found.get(n) or empty | recorded.get(n, {}) | {"task": n}).items()}
            | {"library": libraries.get(n), "certified_us": certified.get(n)} for n in names]


def _plain(value: Any) -> Any:
    """JSON-ready: NaN and pandas' missing values as None, NumPy scalars as Python numbers."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _summary(rows: list[dict[str, Any]]) -> Any:
    import pandas as pd

    from fsr.report.tables import SUMMARY_COLUMNS

    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def geomeans(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per comparator: the geometric mean of the best kernels' speedups over the tasks where
    that comparator was measured (`value` None where none was), and how many tasks that is
    (fsr.report.tables.speedup_geomeans, so bench and report agree)."""
    from fsr.report.tables import speedup_geomeans

    means = speedup_geomeans(_summary(rows)).set_index("column")
    return {name: {"value": _plain(means.at[column, "geomean"]), "tasks": int(means.at[column, "tasks"])}
            for column, name in COMPARATORS}


def fast_p(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """KernelBench's fast_0, fast_1 and fast_2 per comparator over every task of the bench
    (fsr.report.tables.fast_p): {"torch": {"tasks": 16, "measured": 16, "fast_1": 0.75, "fast_1_tasks": 12, ...}}."""
    from fsr.report.tables import fast_p as table

    names = dict(COMPARATORS)
    return {names[r.pop("column")]: {k: _plain(v) for k, v in r.items() if k != "comparator"}
            for r in table(_summary(rows)).to_dict("records") if r["column"] in names}


def _us(value: float | None) -> str:
    return latency_text(value, missing="n/a")


def _x(value: float | None) -> str:
    return speedup_text(value, missing="n/a")


def _library(row: dict[str, Any]) -> str:
    """The speedup over the library, with the library's name where the task names it:
    "0.40x (cuDNN SDPA)"; "n/a (cuDNN SDPA not timed)" where the named library has no figure
    (it refused the benchmark size or failed: no other backend stands in under its name)."""
    text, name = _x(row["speedup_library"]), row.get("library")
    if name and row.get("library_us") is None:
        return f"{text} ({name} not timed)"
    return f"{text} ({name})" if name and row["speedup_library"] is not None else text


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _provenance(recorded: dict[str, Any]) -> str:
    """`Command: ... Started: ...` from run.json, for whoever quotes the table."""
    words = recorded.get("command") or []
    words = words.split() if isinstance(words, str) else list(words)
    if words and Path(words[0]).name in ("fsr", "__main__.py"):  # the script or `python -m fsr`
        words[0] = "fsr"
    command = " ".join(words)
    started = str(recorded.get("created_at") or "")[:16].replace("T", " ")
    return f"Command: `{command}`. Started: {started} UTC." if command and started else ""


# Under the table of a certifying run: the best kernels timed again by their certification.
CERTIFIED_NOTE = ("Certification's own median of each best (the same kernel timed again on fresh inputs; "
                  "the table's figure is its screened median, the least of many screenings)")


def to_markdown(rows: list[dict[str, Any]], means: dict[str, dict[str, Any]], run_dir: Path,
                provenance: str = "") -> str:
    """The table: a row per task, then the geometric means (with the tasks each covers), then
    KernelBench's fast_p per comparator."""
    from fsr.report.tables import fast_p as fast_p_table
    from fsr.report.tables import fast_p_text
    from fsr.report.text import FAST_P_INTRO

    devices = sorted({r["device"] for r in rows if r.get("device")})
    lines = [f"# fsr bench: {run_dir.name}", "",
             f"Device: {', '.join(devices) or 'none recorded'}. Lineage: {run_dir}/. {provenance}".rstrip(), "",
             "| task | evaluations | best | of ceiling | vs baseline | vs library | vs torch | vs torch.compile "
             "| vs best of torch | verdicts |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['evaluations']} | {_us(r['best_us'])} | {_pct(r['ceiling_fraction'])} | "
                     f"{_x(r['speedup_baseline'])} | {_library(r)} | {_x(r['speedup_torch'])} | "
                     f"{_x(r['speedup_torch_compile'])} | {_x(r['speedup_pytorch'])} | {r['verdicts'] or '-'} |")
    cells = [f"{_x(m['value'])} ({m['tasks']} tasks)" for m in means.values()]
    lines.append(f"| geometric mean | {sum(r['evaluations'] for r in rows)} | | | {' | '.join(cells)} | |")
    again = [f"{r['task']} {_us(r['certified_us'])} ({r['certified_us'] / r['best_us'] - 1:+.1%})" for r in rows
             if r.get("certified_us") and r.get("best_us")]
    if again:
        lines += ["", f"{CERTIFIED_NOTE}: {', '.join(again)}."]
    lines += ["", f"{FAST_P_INTRO}:", ""]
    lines += [f"- {line}" for line in fast_p_text(fast_p_table(_summary(rows)))]
    return "\n".join(lines) + "\n"


def to_json(rows: list[dict[str, Any]], means: dict[str, dict[str, Any]], run_dir: Path) -> dict[str, Any]:
    """bench.json: the run, a record per task (task_summary's columns) and the geometric means."""
    return {"run_id": run_dir.name, "run_dir": str(run_dir), "tasks": rows, "geomean": means,
            "fast_p": fast_p(rows)}
