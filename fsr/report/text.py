"""The report for terminals (Markdown tables) and for programs (JSON): the figures of the page,
without the drawings."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from fsr.report.data import RunTables, comparison, records

SUMMARY_MD = {"task": "task", "device": "device", "evaluations": "evaluations", "best_us": "best us",
              "ceiling_fraction": "of ceiling", "speedup_baseline": "vs baseline", "speedup_library": "vs library",
              "speedup_torch": "vs PyTorch eager", "evals_per_gpu_minute": "evals per GPU-minute",
              "verdicts": "verdicts"}
PERCENT = {"ceiling_fraction", "occupancy", "ok_share_with", "ok_share_without"}
TIMES = {"speedup_baseline", "speedup_library", "speedup_torch", "speedup_with", "speedup_without", "effect",
         "speedup", "median_ratio"}


def cell(column: str, value: Any) -> str:
    """One table cell as text: fractions as percentages, ratios as speedups, numbers rounded."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if column in PERCENT:
        return f"{value:.1%}"
    if column in TIMES:
        return f"{value:.2f}x"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame, columns: dict[str, str] | None = None) -> str:
    """A Markdown table of `frame`, `columns` choosing and renaming (all when None)."""
    columns = columns or {c: c for c in frame.columns}
    lines = ["| " + " | ".join(columns.values()) + " |", "|" + "---|" * len(columns)]
    for row in frame[list(columns)].itertuples(index=False):
        lines.append("| " + " | ".join(cell(c, v) for c, v in zip(columns, row, strict=True)) + " |")
    return "\n".join(lines)


def run_markdown(t: RunTables) -> str:
    run = t.run
    parts = [f"## Run {run.run_id} ({run.device}, {len(run.evaluations)} evaluations)",
             markdown_table(t.summary, SUMMARY_MD)]
    for task, chain in t.chains.items():
        if not chain.empty:
            parts += [f"### {task}: the winner's lineage", markdown_table(chain.drop(columns="diff"))]
    if not t.effects.empty:
        parts += ["### What paid off (geomean speedup over baseline of correct kernels)",
                  markdown_table(t.effects)]
    if not t.tuning.empty:
        parts += ["### Tuning (trial latency relative to the candidate's best trial)", markdown_table(t.tuning)]
    parts += ["### Seconds per evaluation, by stage",
              markdown_table(t.stages.pivot(index="task", columns="stage", values="per_evaluation_s").reset_index()),
              "### Workers", markdown_table(t.workers)]
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
        parts += ["## Runs compared", markdown_table(summary, {"run": "run", **SUMMARY_MD})]
    return "\n\n".join(parts + [run_markdown(t) for t in runs]) + "\n"


def run_json(t: RunTables) -> dict[str, Any]:
    run = t.run
    return {
        "run_id": run.run_id, "path": str(run.path), "device": run.device, "label": run.label,
        "evaluations": len(run.evaluations), "summary": records(t.summary), "best_so_far": records(t.curves),
        "verdicts": records(t.verdicts), "features": records(t.effects), "tuning": records(t.tuning),
        "winners": {task: records(chain) for task, chain in t.chains.items()}, "stages": records(t.stages),
        "workers": records(t.workers), "tokens": records(t.tokens), "driver": records(t.driver),
        "optuna_journal": str(t.journal) if t.journal else None,
    }


def json_text(runs: list[RunTables]) -> str:
    """Every table of the report as one JSON document: {"runs": [...], "comparison": [...]}."""
    doc: dict[str, Any] = {"runs": [run_json(t) for t in runs]}
    if len(runs) > 1:
        doc["comparison"] = records(comparison(runs)[0])
    return json.dumps(doc, indent=1) + "\n"
