"""The report as one self-contained HTML page: plotly's JavaScript embedded once, every figure's
data inline, no network needed to open it.

The JavaScript is plotly.js's basic bundle (scatter and bar traces: all the report draws, 1.2 MB),
shipped in fsr/report/static/ with its licence, rather than the full library the plotly package
carries (4.8 MB, most of it 3-D, map and WebGL traces), which alone made a one-task page 4.8 MB.
"""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from functools import cache
from importlib import resources

import pandas as pd
import plotly.graph_objects as go

from fsr.report import certifications, notes, plots
from fsr.report.data import RunTables, comparison, tasks_in_one_run
from fsr.report.text import (
    COMPARED_MD,
    NOT_TIMED,
    WORKERS_NOTE,
    column_cells,
    not_timed_columns,
    not_timed_note,
    summary_columns,
    summary_display,
    summary_notes,
    with_geomean,
    workers_columns,
)

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1360px; color: #222;
  box-sizing: border-box; padding-right: 5em; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #ccc; margin-top: 2em; } h3 { margin-top: 1.6em; }
.meta, .note { color: #555; font-size: 0.9em; } .note { margin: 0.2em 0; }
nav.toc { font-size: 0.9em; background: #f7f7f7; border: 1px solid #e2e2e2; padding: 0.4em 1em; }
nav.toc ul { margin: 0.2em 0; padding-left: 1.2em; } nav.toc li { margin: 0.15em 0; }
a.top { font-size: 0.65em; font-weight: normal; margin-left: 0.8em; color: #777; }
a#to-top { position: fixed; right: 1em; bottom: 1em; background: #fff; border: 1px solid #bbb;
  border-radius: 4px; padding: 0.3em 0.6em; font-size: 0.85em; text-decoration: none; color: #333; }
table.fsr { border-collapse: collapse; font-size: 0.85em; margin: 0.6em 0; }
table.fsr th, table.fsr td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
table.fsr td.n { white-space: nowrap; }
table.fsr th { background: #f3f3f3; } table.fsr td:first-child { text-align: left; }
table.fsr tr.geomean td { font-weight: 600; border-top: 2px solid #999; }
table.fsr td.not-timed { color: #a33; font-style: italic; white-space: nowrap; }
table.fsr tr.impossible td { background: #fde8e8; color: #a00; font-weight: 600; }
.grid { display: grid; grid-template-columns: 1fr 1fr; gap: 8px; }
details.run > summary { font-size: 1.1em; cursor: pointer; margin: 0.6em 0; }
pre.diff { font-size: 0.8em; background: #f8f8f8; padding: 6px; overflow-x: auto; max-height: 30em; }
"""
# The page's right gutter (padding-right above) holds the fixed "top" link, so that it never
# covers a plot's legend, however narrow the window.
# Opens the folded sections holding a link's target (a run's details on a comparison page), and
# redraws plots in a section when it opens: plotly sizes a plot drawn while hidden by default.
SCRIPT = """
function fsrOpenTarget() {
  const id = decodeURIComponent(location.hash.slice(1));
  const el = id && document.getElementById(id);
  if (!el) return;
  for (let d = el.closest('details'); d; d = d.parentElement.closest('details')) d.open = true;
  el.scrollIntoView();
}
window.addEventListener('hashchange', fsrOpenTarget);
window.addEventListener('load', fsrOpenTarget);
document.addEventListener('toggle', e => {
  if (e.target.open) e.target.querySelectorAll('.plotly-graph-div').forEach(p => Plotly.Plots.resize(p));
}, true);
"""


@cache
def plotly_js() -> str:
    """plotly.js's basic bundle (the version the plotly package's figures are written for), as
    the page embeds it once."""
    return resources.files("fsr.report").joinpath("static", "plotly-basic.min.js").read_text()


def anchor(*parts: object) -> str:
    """An element id from parts (a run's number, a task's name): letters, digits, - and _ only."""
    return "-".join(re.sub(r"[^A-Za-z0-9_]+", "_", str(p)) for p in parts)


def _top(label: str, ident: str, level: int = 3) -> str:
    return f"<h{level} id='{ident}'>{html.escape(label)}<a class='top' href='#top'>&uarr; top</a></h{level}>"


def table_html(frame: pd.DataFrame, columns: dict[str, str] | None = None, links: dict[str, str] | None = None,
               last_row_class: str = "", row_classes: list[str] | None = None) -> str:
    """A table, `columns` choosing and renaming (all columns when None), each column in one
    number format (fractions as percentages, ratios as speedups, see `text.column_cells`);
    `links` maps first-column values to the ids they link to; `row_classes`, a class per row
    (`last_row_class` for the last one only). A "not timed" cell is marked as such."""
    columns = {c: n for c, n in columns.items() if c in frame} if columns else {c: c for c in frame.columns}
    cells = [[html.escape(v) for v in column_cells(c, frame[c], markdown=False)] for c in columns]
    first = list(columns)[0]
    if links:
        cells[0] = [f"<a href='#{links[v]}'>{text}</a>" if v in links else text
                    for v, text in zip(frame[first], cells[0], strict=True)]
    rows = list(zip(*cells, strict=True))
    classes = list(row_classes or [""] * len(rows))
    if last_row_class and classes:
        classes[-1] = last_row_class
    body = ["<tr" + (f" class='{classes[i]}'" if classes[i] else "") + ">" + "".join(_cell(c) for c in row) + "</tr>"
            for i, row in enumerate(rows)]
    head = "".join(f"<th>{html.escape(name)}</th>" for name in columns.values())
    return f"<table class='fsr'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _cell(text: str) -> str:
    """A table cell: "not timed" marked as such; a figure with no space in it ("1,234.5",
    "97.0-105.0") never broken across lines, where text with spaces may wrap."""
    if text == NOT_TIMED:
        return f"<td class='not-timed'>{text}</td>"
    return f"<td class='n'>{text}</td>" if text and " " not in text and "<" not in text else f"<td>{text}</td>"


def summary_html(t: RunTables, links: dict[str, str]) -> str:
    """One run's task summary, a geometric-mean row last, each task linking to its section; the
    comparators not timed and why; then where each winner is, and which searches stopped short
    and why."""
    summary = t.summary
    _, means = with_geomean(summary)
    shown = summary_display(summary, t.missing)
    parts = [table_html(shown, summary_columns(summary, kept=not_timed_columns(t.missing)), links, "geomean"),
             f"<p class='note'>{html.escape(means)}</p>"]
    missed = not_timed_note(t)
    if missed:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in missed[1:])
        parts.append(f"<p class='note'>{html.escape(missed[0])}</p><ul class='note not-timed'>{items}</ul>")
    parts += [f"<p class='note'>{html.escape(note)}</p>" for note in summary_notes(summary)]
    for heading, lines in ((WINNERS, notes.winner_notes(t)), (STOPPED, notes.stop_notes(t))):
        if lines:
            items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
            parts.append(f"<p class='note'>{heading}</p><ul class='note'>{items}</ul>")
    if not t.certifications.empty:
        parts += [f"<p class='note'>{html.escape(certifications.certification_line(t.certifications, len(summary)))}</p>",
                  table_html(t.certifications, certifications.HEADERS),
                  f"<p class='note'>{html.escape(certifications.NOTE)}</p>"]
    return "\n".join(parts)


WINNERS = ("The winners (the best kernel of each task, its spread, rate, registers and spills, the values "
           "tuning chose, its file):")
STOPPED = "Searches that stopped short of their budget, or never beat the kernel they started from:"


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


def task_html(t: RunTables, task: str, ident: str) -> str:
    refs = t.references(task)
    return "\n".join([
        _top(task, ident), "<div class='grid'>",
        figure_html(plots.best_so_far_figure(t.curves, task, "evaluation", refs)),
        figure_html(plots.best_so_far_figure(t.curves, task, "elapsed_s", refs)),
        figure_html(plots.verdict_figure(t.verdicts, task)),
        figure_html(plots.feature_figure(t.effects, task)), "</div>",
        figure_html(plots.tuning_figure(t.tuning, task)) if (t.tuning["task"] == task).any() else "",
        "<h4>The winner's lineage, seed first</h4>", chain_html(t.chains[task]),
    ])


def costs_html(t: RunTables, ident: str) -> str:
    journal = (f"<p>Tuning journal: <code>{html.escape(str(t.journal))}</code> "
               f"(open it with <code>optuna-dashboard {html.escape(str(t.journal))}</code>).</p>" if t.journal else "")
    tokens = table_html(t.tokens) if not t.tokens.empty else "<p>No model was used: no tokens, no cost.</p>"
    driver = (table_html(t.driver) if not t.driver.empty
              else f"<p>{html.escape(notes.campaign_note(t))} The driver's time is written when a campaign of "
                   "fsr run ends.</p>")
    return "\n".join([
        _top("Where the time went", ident), "<div class='grid'>", figure_html(plots.stage_figure(t.stages)),
        figure_html(plots.occupancy_figure(t.workers)), "</div>",
        table_html(t.workers, workers_columns(t.workers), row_classes=["impossible" if f else "" for f in t.workers["flag"]]),
        f"<p class='note'>{html.escape(WORKERS_NOTE)}</p>",
        "<h4>The search driver, per campaign</h4>", driver,
        "<h4>Model tokens and cost</h4>", tokens, journal,
    ])


def run_anchors(number: int, t: RunTables) -> dict[str, str]:
    """Ids of a run's sections: "run" itself, each task, and "costs"."""
    return {"run": anchor("run", number), **{task: anchor("run", number, task) for task in t.summary["task"]},
            "costs": anchor("run", number, "costs")}


def run_html(t: RunTables, number: int, folded: bool = False) -> str:
    """One run: its summary, then per task its figures and winner, then its costs; `folded`
    (on a comparison page) puts all but the summary in a closed section."""
    info, run, ids = t.run.info, t.run, run_anchors(number, t)
    command = info.get("command", "")
    command = " ".join(command) if isinstance(command, list) else str(command)
    head = [_top(f"Run {run.run_id}", ids["run"], 2),
            f"<p class='meta'>{html.escape(run.device)}; {len(run.evaluations)} evaluations; started "
            f"{html.escape(notes.readable_time(info.get('created_at')))}; <code>{html.escape(command)}</code></p>",
            f"<p class='meta'>{html.escape(notes.campaign_note(t))}</p>",
            summary_html(t, ids)]
    body = [*(task_html(t, task, ids[task]) for task in t.summary["task"]), costs_html(t, ids["costs"])]
    if folded:
        body = [f"<details class='run'><summary>Run {html.escape(run.run_id)}: each task's plots and lineage, "
                "where the time went</summary>", *body, "</details>"]
    return "\n".join(head + body)


def comparison_html(runs: list[RunTables]) -> str:
    """The runs side by side: one table by task (with each run's best against the first's),
    then per task that more than one run timed, the runs' best-so-far curves."""
    summary, curves = comparison(runs)
    alone = tasks_in_one_run(curves)
    shared = [task for task in sorted(curves["task"].unique()) if task not in alone]
    parts = [_top("Runs compared", "compare", 2),
             table_html(summary, summary_columns(summary, COMPARED_MD), {t: anchor("compare", t) for t in shared}),
             f"<p class='note'>best / first run's: the run's best latency over that of the first run listed "
             f"({html.escape(runs[0].run.label)}); below 1.00x is faster.</p>"]
    if alone:
        parts.append(f"<p class='note'>Timed by one run only, so not plotted here: {html.escape(', '.join(alone))}.</p>")
    for task in shared:
        parts += [_top(task, anchor("compare", task)), "<div class='grid'>",
                  *(figure_html(plots.comparison_figure(curves, task, x)) for x in ("evaluation", "elapsed_s")),
                  "</div>"]
    return "\n".join(parts)


def contents_html(runs: list[RunTables]) -> str:
    """The table of contents: the comparison's tasks, then each run's tasks and costs."""
    def links(ids: dict[str, str], names: list[str]) -> str:
        return ", ".join(f"<a href='#{ids[n]}'>{html.escape(n)}</a>" for n in names)

    items = []
    if len(runs) > 1:
        _, curves = comparison(runs)
        alone = set(tasks_in_one_run(curves))
        shared = [t for t in sorted(curves["task"].unique()) if t not in alone]
        listed = f": {links({t: anchor('compare', t) for t in shared}, shared)}" if shared else ""
        items.append(f"<li><a href='#compare'>Runs compared</a>{listed}</li>")
    for number, t in enumerate(runs, 1):
        ids = run_anchors(number, t)
        tasks = [str(task) for task in t.summary["task"]]
        items.append(f"<li><a href='#{ids['run']}'>Run {html.escape(t.run.run_id)}</a> ({html.escape(t.run.device)}): "
                     f"{links(ids, tasks)}; <a href='#{ids['costs']}'>where the time went</a></li>")
    return f"<nav class='toc'><strong>Contents</strong><ul>{''.join(items)}</ul></nav>"


def html_page(runs: list[RunTables]) -> str:
    """The whole page: contents, a comparison when there are several runs (each run's details
    then folded), then each run."""
    title = "fsr report: " + ", ".join(r.run.run_id for r in runs)
    body = [f"<h1 id='top'>{html.escape(title)}</h1>",
            f"<p class='meta'>Written {datetime.now(UTC):%Y-%m-%d %H:%M} UTC from the lineage of "
            f"{', '.join(html.escape(str(r.run.path)) for r in runs)}.</p>", contents_html(runs)]
    if len(runs) > 1:
        body.append(comparison_html(runs))
    body += [run_html(r, number, folded=len(runs) > 1) for number, r in enumerate(runs, 1)]
    body.append("<a id='to-top' href='#top'>&uarr; top</a>")
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style><script type='text/javascript'>{plotly_js()}</script>"
            f"<script>{SCRIPT}</script></head>\n<body>\n{chr(10).join(body)}\n</body></html>\n")
