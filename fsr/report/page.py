"""The report as one self-contained HTML page: plotly's JavaScript embedded once, every figure's
data inline, no network needed to open it."""

from __future__ import annotations

import html
from datetime import UTC, datetime

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from fsr.report import plots
from fsr.report.data import RunTables, comparison
from fsr.report.text import SUMMARY_MD, cell

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1360px; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #ccc; margin-top: 2em; } h3 { margin-top: 1.6em; }
.meta { color: #555; font-size: 0.9em; }
table.fsr { border-collapse: collapse; font-size: 0.85em; margin: 0.6em 0; }
table.fsr th, table.fsr td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
table.fsr th { background: #f3f3f3; } table.fsr td:first-child { text-align: left; }
.grid { display: grid; grid-template-columns: 1fr 1fr; gap: 8px; }
pre.diff { font-size: 0.8em; background: #f8f8f8; padding: 6px; overflow-x: auto; max-height: 30em; }
"""
def table_html(frame: pd.DataFrame, columns: dict[str, str] | None = None) -> str:
    """A table, `columns` choosing and renaming (all columns when None); numbers formatted as
    in the Markdown report (fractions as percentages, ratios as speedups)."""
    columns = columns or {c: c for c in frame.columns}
    shown = pd.DataFrame({name: frame[c].map(lambda v, c=c: cell(c, v)) for c, name in columns.items()})
    return shown.to_html(index=False, classes="fsr", border=0, escape=True)


def summary_html(summary: pd.DataFrame) -> str:
    """The task summary (with a run column when several runs are compared)."""
    return table_html(summary, {"run": "run", **SUMMARY_MD} if "run" in summary else SUMMARY_MD)


def figure_html(fig: go.Figure) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False, "responsive": True})


CHAIN_SHOWN = 40  # steps of a winner's chain shown open; a longer chain's table is folded
DIFFS_SHOWN = 25  # diffs of the last steps embedded: the page's size stays bounded (all are in the JSON)


def chain_html(chain: pd.DataFrame) -> str:
    """The winner's lineage: a table of steps, then each of the last steps' diff against its parent."""
    if chain.empty:
        return "<p>No correct kernel.</p>"
    table = table_html(chain.drop(columns="diff"))
    parts = [table if len(chain) <= CHAIN_SHOWN else
             f"<details><summary>{len(chain)} steps from the seed to the best kernel</summary>{table}</details>"]
    if len(chain) > DIFFS_SHOWN:
        parts.append(f"<p>Diffs of the last {DIFFS_SHOWN} steps (all are in <code>--format json</code>):</p>")
    for _, step in chain.tail(DIFFS_SHOWN).iterrows():
        if step["diff"]:
            parts.append(f"<details><summary>step {step['step']}: {html.escape(step['move'])} "
                         f"({step['candidate_id']})</summary><pre class='diff'>{html.escape(step['diff'])}"
                         "</pre></details>")
    return "\n".join(parts)


def task_html(t: RunTables, task: str) -> str:
    refs = t.references(task)
    return "\n".join([
        f"<h3>{html.escape(task)}</h3>", "<div class='grid'>",
        figure_html(plots.best_so_far_figure(t.curves, task, "evaluation", refs)),
        figure_html(plots.best_so_far_figure(t.curves, task, "elapsed_s", refs)),
        figure_html(plots.verdict_figure(t.verdicts, task)),
        figure_html(plots.feature_figure(t.effects, task)), "</div>",
        figure_html(plots.tuning_figure(t.tuning, task)) if (t.tuning["task"] == task).any() else "",
        "<h4>The winner's lineage, seed first</h4>", chain_html(t.chains[task]),
    ])


def costs_html(t: RunTables) -> str:
    journal = (f"<p>Tuning journal: <code>{html.escape(str(t.journal))}</code> "
               f"(open it with <code>optuna-dashboard {html.escape(str(t.journal))}</code>).</p>" if t.journal else "")
    tokens = table_html(t.tokens) if not t.tokens.empty else "<p>No model was used: no tokens, no cost.</p>"
    driver = (table_html(t.driver) if not t.driver.empty
              else "<p>No campaign of this run has ended yet: the driver's time is written when one does.</p>")
    return "\n".join([
        "<h3>Where the time went</h3>", "<div class='grid'>", figure_html(plots.stage_figure(t.stages)),
        figure_html(plots.occupancy_figure(t.workers)), "</div>", table_html(t.workers),
        "<h4>The search driver, per campaign</h4>", driver,
        "<h4>Model tokens and cost</h4>", tokens, journal,
    ])


def run_html(t: RunTables) -> str:
    info, run = t.run.info, t.run
    command = info.get("command", "")
    command = " ".join(command) if isinstance(command, list) else str(command)
    return "\n".join([
        f"<h2>Run {html.escape(run.run_id)}</h2>",
        f"<p class='meta'>{html.escape(run.device)}; {len(run.evaluations)} evaluations; started "
        f"{html.escape(str(info.get('created_at', '?')))}; <code>{html.escape(command)}</code></p>",
        summary_html(t.summary), *(task_html(t, task) for task in t.summary["task"]), costs_html(t),
    ])


def comparison_html(runs: list[RunTables]) -> str:
    summary, curves = comparison(runs)
    figures = [figure_html(plots.comparison_figure(curves, task, x))
               for task in sorted(curves["task"].unique()) for x in ("evaluation", "elapsed_s")]
    return "\n".join(["<h2>Runs compared</h2>", summary_html(summary), "<div class='grid'>", *figures, "</div>"])


def html_page(runs: list[RunTables]) -> str:
    """The whole page: a comparison when there are several runs, then each run."""
    title = "fsr report: " + ", ".join(r.run.run_id for r in runs)
    body = [f"<h1>{html.escape(title)}</h1>",
            f"<p class='meta'>Written {datetime.now(UTC):%Y-%m-%d %H:%M} UTC from the lineage of "
            f"{', '.join(html.escape(str(r.run.path)) for r in runs)}.</p>"]
    if len(runs) > 1:
        body.append(comparison_html(runs))
    body += [run_html(r) for r in runs]
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style><script type='text/javascript'>{get_plotlyjs()}</script></head>\n"
            f"<body>\n{chr(10).join(body)}\n</body></html>\n")
