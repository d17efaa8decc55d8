"""The report for terminals (Markdown tables) and for programs (JSON): the figures of the page,
without the drawings."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from fsr.report import ablation, ceilings, certifications, comparators, costs, notes, tables
from fsr.report.certifications import SCREENING_NOTE
from fsr.report.data import RunTables, comparison, records

SUMMARY_MD = {"task": "task", "dtype": "dtype", "device": "device", "evaluations": "evaluations", "best_us": "best us",
              "spread": "p10-p90 us", "rate": "rate", "lead_text": "vs fastest of library and PyTorch",
              "speedup_torch": "vs PyTorch eager", "speedup_torch_compile": "vs torch.compile",
              "speedup_library": "vs library", "roofline": "of roofline",
              "speedup_baseline": "vs baseline (plain kernel)", "torch_compile_s": "torch.compile s",
              "evals_per_gpu_minute": "evals per GPU-minute", "verdicts": "verdicts", "screening": "screening"}
COMPARED_MD = {"task": "task", "dtype": "dtype", "run": "run", "evaluations": "evaluations", "best_us": "best us",
               "vs_first_run": "best / first run's", "speedup_lead": "vs fastest of library and PyTorch",
               "speedup_torch": "vs PyTorch eager", "speedup_torch_compile": "vs torch.compile",
               "speedup_library": "vs library", "ceiling_fraction": "of roofline",
               "speedup_baseline": "vs baseline (plain kernel)", "evals_per_gpu_minute": "evals per GPU-minute"}
# A shown column made from others (`summary_display`), and the column whose values it shows.
SHOWN_FROM = {"spread": "p10_us", "rate": "gbps", "lead_text": "speedup_lead", "roofline": "ceiling_fraction"}
PERCENT = {"ceiling_fraction", "occupancy", "evaluating", "certifying", "preparing", "idle", "ok_share_with", "ok_share_without"}
TIMES = {"speedup_lead", "speedup_baseline", "speedup_library", "speedup_torch", "speedup_torch_compile",
         "speedup_pytorch", "speedup_with", "speedup_without", "effect", "speedup", "median_ratio", "vs_first_run"}
NOT_TIMED = "not timed"
ROOFLINE_NOTE = ("of roofline: the best kernel's rate against the device's measured ceiling named beside it: the "
                 "copy bandwidth where the task's bytes bind, else the arithmetic rate of its dtype (the SGEMM "
                 "rate for float32, the 16-bit tensor-core rate for bfloat16 and float16); a kernel that mostly "
                 "reads can pass 100%. rate: the best kernel's GB/s or TFLOP/s, as that ceiling counts it. "
                 "p10-p90: the 10th and 90th percentiles of its timed samples.")
LEAD_NOTE = ("vs fastest of library and PyTorch: the best kernel's speedup over the fastest of the library, "
             "PyTorch eager and torch.compile that was timed for the task (named), what a user would otherwise "
             "call; the baseline is a deliberately plain kernel, the search's starting point.")


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def decimals(values: pd.Series) -> int:
    """Decimals for a column of numbers, one for the whole column, from its largest magnitude:
    1 from 10 up, 2 from 1, 3 from 0.1, else 4 (8.1e-05, 0.0354 and 0 read 0.0001, 0.0354, 0.0000)."""
    largest = pd.to_numeric(values, errors="coerce").abs().max()
    if largest != largest or largest >= 10:  # NaN: nothing to show
        return 1
    return 2 if largest >= 1 else 3 if largest >= 0.1 else 4


def _numeric(values: pd.Series) -> bool:
    """Whether a column holds real numbers with fractions (None allowed; not bools, not ints)."""
    present = [v for v in values if not _missing(v)]
    return bool(present) and all(isinstance(v, float | np.floating) for v in present)


def column_cells(column: str, values: pd.Series, markdown: bool = True) -> list[str]:
    """A column as text, one format for the whole column: fractions as percentages, ratios as
    speedups, other real numbers with the column's `decimals`, anything else as it is."""
    if column in PERCENT:  # text where a cell says why it has no number ("not timed")
        return ["" if _missing(v) else v if isinstance(v, str) else f"{v:.1%}" for v in values]
    if column in TIMES:
        return ["" if _missing(v) else v if isinstance(v, str) else f"{v:.2f}x" for v in values]
    if _numeric(values):
        places = decimals(values)
        return ["" if _missing(v) else f"{v:,.{places}f}" for v in values]
    text = ["" if _missing(v) else str(v) for v in values]
    return [t.replace("|", "\\|").replace("\n", " ") for t in text] if markdown else text


def summary_columns(summary: pd.DataFrame, base: dict[str, str] = SUMMARY_MD,
                    kept: frozenset[str] = frozenset()) -> dict[str, str]:
    """The summary's columns to show: the device only where the tasks ran on more than one
    model (otherwise the run's heading names it once); the dtype where the lineage records it
    (not in one from before the column); no comparator that no task measured (the baseline of
    an imported suite, torch.compile in a lineage from before it) unless it is in `kept`: one
    that matters and was not timed (`not_timed_columns`) is shown, its cells saying so; the
    screening shortcuts only where a task took one (`shows_screening`)."""
    devices = set(summary["device"].dropna()) - {""} if "device" in summary else set()
    unmeasured = {c for c in (*tables.SPEEDUPS, "torch_compile_s", *SHOWN_FROM.values())
                  if c in summary and pd.to_numeric(summary[c], errors="coerce").isna().all()} - kept
    unmeasured |= {shown for shown, source in SHOWN_FROM.items() if source in unmeasured or source not in summary}
    if "dtype" not in summary or not (set(summary["dtype"].dropna()) - {""}):
        unmeasured.add("dtype")
    if not shows_screening(summary):
        unmeasured.add("screening")
    return {c: name for c, name in base.items() if (c != "device" or len(devices) > 1) and c not in unmeasured}


def shows_screening(summary: pd.DataFrame) -> bool:
    """Whether any task's screening was cut short or answered from an earlier judgement: the
    summary's `screening` column and its note are shown only then."""
    return "screening" in summary and bool(summary["screening"].fillna("").astype(str).ne("").any())


def summary_notes(summary: pd.DataFrame) -> list[str]:
    """The notes under a run's summary table: fast_p, what the lead and the roofline are, and
    what the screening column counts where it is shown."""
    return [fast_p_note(summary), LEAD_NOTE, ROOFLINE_NOTE, *([SCREENING_NOTE] if shows_screening(summary) else [])]


def not_timed_columns(missing: pd.DataFrame) -> frozenset[str]:
    """The speedup columns to show though no task has a figure in them: a comparator that matters
    and was not timed, except torch.compile switched off for the run (one note says so)."""
    kept = set(missing.loc[missing["reason"] != comparators.OFF, "column"])
    return frozenset(kept | ({"speedup_lead"} if kept else set()))


def summary_display(summary: pd.DataFrame, missing: pd.DataFrame | None = None) -> pd.DataFrame:
    """The summary as its table shows it, geometric-mean row last (`with_geomean`), with the
    columns made for reading: `spread` (p10-p90 us), `rate` (as the task's ceiling counts it),
    `lead_text` (the speedup over the fastest comparator, named), `roofline` (the fraction and
    the ceiling it is of), the library's speedup with the library's name where the task names it;
    "not timed" in the cells of comparators that matter and have no time."""
    out, _ = with_geomean(summary)
    places = decimals(out["best_us"]) if "best_us" in out else 1
    col = out.get
    out["spread"] = ["" if _missing(a) or _missing(b) else f"{a:,.{places}f}-{b:,.{places}f}"
                     for a, b in zip(col("p10_us", [None] * len(out)), col("p90_us", [None] * len(out)), strict=True)]
    out["rate"] = [ceilings.rate_text(g, t, b) for g, t, b in zip(
        col("gbps", [None] * len(out)), col("tflops", [None] * len(out)), col("bound", [""] * len(out)), strict=True)]
    out["lead_text"] = ["" if _missing(x) else f"{x:.2f}x ({name})" if isinstance(name, str) else f"{x:.2f}x"
                        for x, name in zip(col("speedup_lead", [None] * len(out)), col("lead", [None] * len(out)),
                                           strict=True)]
    if "library_name" in out:  # the library named where its task names it: "0.40x (cuDNN SDPA)"
        out["speedup_library"] = pd.Series([f"{x:.2f}x ({n})" if isinstance(n, str) and n and not _missing(x) else x
                                            for x, n in zip(out["speedup_library"], out["library_name"], strict=True)],
                                           index=out.index, dtype=object)
    out["roofline"] = ["" if _missing(f) else f"{f:.1%} of {c}" if isinstance(c, str) else f"{f:.1%}"
                       for f, c in zip(col("ceiling_fraction", [None] * len(out)), col("ceiling", [None] * len(out)),
                                       strict=True)]
    for r in (missing if missing is not None else pd.DataFrame(columns=comparators.MISSING_COLUMNS)).itertuples():
        if r.reason != comparators.OFF:
            rows = out["task"] == r.task
            out.loc[rows, r.column] = NOT_TIMED
            out.loc[rows & (out["lead_text"] == ""), "lead_text"] = NOT_TIMED
    return out


def with_geomean(summary: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The summary with a last row of geometric-mean speedups (as `fsr bench`'s table), and a
    line saying over how many tasks each mean is taken."""
    means = tables.speedup_geomeans(summary)
    row = {"task": "geometric mean", **dict(zip(means["column"], means["geomean"], strict=True))}
    # as objects, so integer columns stay integers beside the row's empty cells
    out = pd.concat([summary.astype(object), pd.DataFrame([row], dtype=object)], ignore_index=True)
    names = tables.COMPARATOR_NAMES
    counts = ", ".join(f"{names[c]} {n}" for c, n in zip(means["column"], means["tasks"], strict=True))
    return out, f"Geometric means over the tasks where each was measured ({counts} of {len(summary)})."


FAST_P_INTRO = ("KernelBench's fast_p over all the tasks (correct, and more than p times faster; a task whose "
                "comparator was not timed counts as not faster)")


def fast_p_note(summary: pd.DataFrame) -> str:
    """KernelBench's fast_p over the run's tasks, one sentence per comparator measured."""
    return f"{FAST_P_INTRO}: " + "; ".join(tables.fast_p_text(tables.fast_p(summary))) + "."


def markdown_table(frame: pd.DataFrame, columns: dict[str, str] | None = None) -> str:
    """A Markdown table of `frame`, `columns` choosing and renaming (all when None; one the frame
    lacks, e.g. a shown column of `summary_display` asked of a bare summary, is left out)."""
    columns = {c: n for c, n in columns.items() if c in frame} if columns else {c: c for c in frame.columns}
    cells = [column_cells(c, frame[c]) for c in columns]
    lines = ["| " + " | ".join(columns.values()) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in zip(*cells, strict=True)]
    return "\n".join(lines)


WORKERS_MD = {"worker": "worker", "device": "device", "evaluations": "evaluations", "busy_s": "busy s",
              "setup_s": "setup s", "occupancy": "busy share", "evaluating": "evaluating", "certifying": "certifying",
              "preparing": "preparing",
              "idle": "idle", "preparations": "preparations", "first_start_s": "first start s",
              "idle_end_s": "idle at end s", "flag": "check"}
WORKERS_NOTE = ("busy s: the wall time charged to the worker's evaluations; setup s: the part of it spent starting "
                "its GPU child and preparing tasks; busy share: busy s over the run's span (from the first "
                "evaluation's start to the last result), split into evaluating (screening candidates), certifying "
                "(judging screened results again, shown where the run certified any) and preparing, the rest of "
                "the span idle; preparations: how many times it prepared its most prepared task (a campaign that keeps its "
                "working set prepares each once or twice); first start s: when it began its first evaluation, "
                "from the run's start; idle at end s: how long it sat idle after its last result. A worker is busy "
                "at most the whole span: a busy share over 100% is impossible (its evaluations' charged times "
                "overlap, or the clocks that stamped them disagree), and is flagged, not to be read as real.")
FEATURES_HEADING = ("What paid off (geometric-mean speedup of correct kernels with and without each feature, over "
                    "the task's baseline, or PyTorch eager for a task without one)")


def workers_columns(workers: pd.DataFrame) -> dict[str, str]:
    """The workers table's columns: `certifying` only where a worker certified anything."""
    certified = "certifying" in workers and bool(pd.to_numeric(workers["certifying"], errors="coerce").gt(0).any())
    return {c: name for c, name in WORKERS_MD.items() if c != "certifying" or certified}


def not_timed_note(t: RunTables) -> list[str]:
    """The comparators that matter and were not timed, and why, as lines (none when all were)."""
    lines = comparators.not_timed_lines(t.missing, len(t.summary))
    return ["Not timed:", *lines] if lines else []


def run_markdown(t: RunTables) -> str:
    run = t.run
    _, means = with_geomean(t.summary)
    shown = summary_display(t.summary, t.missing)
    parts = [f"## Run {run.run_id} ({run.device}, {len(run.evaluations)} evaluations)",
             f"Started {notes.readable_time(run.info.get('created_at'))}. {notes.campaign_note(t)}",
             markdown_table(shown, summary_columns(t.summary, kept=not_timed_columns(t.missing))), means]
    missed = not_timed_note(t)
    if missed:
        parts.append("\n".join([missed[0], *(f"- {line}" for line in missed[1:])]))
    parts += summary_notes(t.summary)
    for heading, lines in (("The winners:", notes.winner_notes(t)),
                           ("Searches that stopped short:", notes.stop_notes(t))):
        if lines:
            parts.append("\n".join([heading, *(f"- {line}" for line in lines)]))
    if not t.certifications.empty:
        parts += [certifications.certification_line(t.certifications, len(t.summary)),
                  markdown_table(t.certifications, certifications.HEADERS), certifications.NOTE]
    parts += ablation.diagnostics_lines(run.evaluations, run.info.get("config", {}) or {})
    for task, chain in t.chains.items():
        if not chain.empty:
            parts += [f"### {task}: the winner's lineage", markdown_table(chain.drop(columns="diff"))]
    if not t.effects.empty:
        parts += [f"### {FEATURES_HEADING}", markdown_table(t.effects)]
    if not t.tuning.empty:
        parts += ["### Tuning (trial latency relative to the candidate's best trial)", markdown_table(t.tuning)]
    parts += ["### Seconds per evaluation, by stage",
              markdown_table(costs.stage_table(t.stages)),
              "### Workers", markdown_table(t.workers, workers_columns(t.workers)), WORKERS_NOTE]
    if not t.driver.empty:
        parts += ["### The search driver, per campaign", markdown_table(t.driver)]
    if not t.tokens.empty:
        parts += ["### Model tokens", markdown_table(t.tokens)]
    if t.journal:
        parts.append(f"Tuning journal: {t.journal} (optuna-dashboard {t.journal})")
    return "\n\n".join(parts)


def markdown(runs: list[RunTables]) -> str:
    """The report's tables as Markdown: a comparison first when there are several runs."""
    parts = []
    if len(runs) > 1:
        summary, _ = comparison(runs)
        parts += ["## Runs compared", markdown_table(summary, summary_columns(summary, COMPARED_MD))]
    return "\n\n".join(parts + [run_markdown(t) for t in runs]) + "\n"


def run_json(t: RunTables) -> dict[str, Any]:
    run = t.run
    return {
        "run_id": run.run_id, "path": str(run.path), "device": run.device, "label": run.label,
        "evaluations": len(run.evaluations), "summary": records(t.summary),
        "fast_p": records(tables.fast_p(t.summary)), "best_so_far": records(t.curves),
        "verdicts": records(t.verdicts), "features": records(t.effects), "tuning": records(t.tuning),
        "winners": {task: records(chain) for task, chain in t.chains.items()}, "stages": records(t.stages),
        "workers": records(t.workers), "tokens": records(t.tokens), "driver": records(t.driver),
        "optuna_journal": str(t.journal) if t.journal else None,
        "created_at": notes.readable_time(run.info.get("created_at")), "campaign": notes.campaign_note(t),
        "winner_notes": notes.winner_notes(t), "stop_notes": notes.stop_notes(t),
        "not_timed": records(t.missing), "certifications": records(t.certifications), "not_timed_notes": comparators.not_timed_lines(t.missing, len(t.summary)),
    }


def json_text(runs: list[RunTables]) -> str:
    """Every table of the report as one JSON document: {"runs": [...], "comparison": [...]}."""
    doc: dict[str, Any] = {"runs": [run_json(t) for t in runs]}
    if len(runs) > 1:
        doc["comparison"] = records(comparison(runs)[0])
    return json.dumps(doc, indent=1) + "\n"
