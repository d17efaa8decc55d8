"""The report's figures: each a small function from a table of fsr.report (already shaped, see
tables.py, kernels.py, costs.py) to a plotly Figure. Nothing here computes a figure's data.

Each figure is built in one constructor call from traces and a layout dict: plotly validates on
every update, and its named templates are deep-copied into each figure, which made those the
larger part of a page's build time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from fsr.report.data import ROOFLINE
from fsr.report.kernels import tuning_bars
from fsr.report.scales import LatencyScale, count_dtick, latency_scale, tick_text

VERDICT_COLOURS = {
    "OK": "#2ca02c", "COMPILE_ERROR": "#7f7f7f", "REJECTED": "#bcbd22", "LAUNCH_ERROR": "#9467bd",
    "WRONG": "#d62728", "CRASH": "#8c564b", "TIMEOUT": "#ff7f0e", "SUSPECT": "#e377c2",
}
# Islands and runs take colours from a qualitative palette (Tableau 10 without its grey); the
# reference lines are greys and black told apart by their dash, so no reference line shares a
# colour with an island. The best over all islands is the bold black solid line.
SERIES_COLOURS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                  "#9c755f")
BEST_COLOUR = "#000000"
REFERENCE_STYLES = {  # line dash and colour of each reference latency (the roofline's name goes on: its ceiling)
    "baseline": ("dot", "#9e9e9e"), "library": ("dash", "#7a7a7a"), "PyTorch eager": ("dashdot", "#555555"),
    "torch.compile": ("longdashdot", "#3d3d3d"), ROOFLINE: ("longdash", "#222222"),
}
AXIS_TITLES = {"evaluation": "evaluations (all islands)", "elapsed_s": "wall time since the run began (s)"}
AXIS_STYLE = {"gridcolor": "#e5e5e5", "zerolinecolor": "#cccccc", "linecolor": "#999999", "automargin": True}


TOOLBAR_PX = 30  # plotly's toolbar, drawn at the figure's top right: titles sit below it


def _figure(traces: list[Any], title: str, x: Mapping[str, Any], y: Mapping[str, Any], height: int = 360,
            **layout: Any) -> go.Figure:
    return go.Figure(data=traces, layout={
        "title": {"text": title, "font": {"size": 14}, "x": 0.01, "xanchor": "left", "yref": "container",
                  "y": 1 - TOOLBAR_PX / height, "yanchor": "top"}, "height": height,
        "template": "none", "margin": {"l": 60, "r": 20, "t": 50 + TOOLBAR_PX, "b": 50}, "plot_bgcolor": "white",
        "paper_bgcolor": "white", "legend": {"font": {"size": 10}}, "xaxis": {**AXIS_STYLE, **x},
        "yaxis": {**AXIS_STYLE, **y}, **layout})


def _title(x: str) -> str:
    return AXIS_TITLES.get(x, x).split(" (")[0]


def series_colour(series: str) -> str:
    """An island's colour ("island 3"), the same in every figure; other series by their number."""
    number = series.rsplit(" ", 1)[-1]
    return SERIES_COLOURS[int(number) % len(SERIES_COLOURS)] if number.isdigit() else SERIES_COLOURS[0]


def _log_axis(scale: LatencyScale, title: str = "best latency so far (us)") -> dict[str, Any]:
    """A log axis with the scale's range and ticks, labelled in full ("2,500", "172.5")."""
    return {"type": "log", "range": scale.log_range, "tickvals": list(scale.ticks_us),
            "ticktext": [tick_text(v) for v in scale.ticks_us], "title": {"text": title}}


def _off_chart_notes(scale: LatencyScale, references: Mapping[str, float]) -> list[dict[str, Any]]:
    """A note at the plot's top (or bottom) edge per reference too far off to draw in range."""
    notes = []
    for side in ("above", "below"):
        names = [n for n in references if scale.off_chart.get(n) == side]
        for i, name in enumerate(names):
            arrow = "&#9650;" if side == "above" else "&#9660;"
            notes.append({"xref": "paper", "yref": "paper", "x": 0.99, "xanchor": "right",
                          "y": 1.0 if side == "above" else 0.0, "yanchor": "top" if side == "above" else "bottom",
                          "yshift": -14 * i if side == "above" else 14 * i, "showarrow": False,
                          "text": f"{arrow} {name} {references[name]:,.1f} us", "font": {"size": 10, "color": "#555555"},
                          "bgcolor": "rgba(255,255,255,0.85)"})
    return notes


def _best_note(x: float, best_us: float) -> dict[str, Any]:
    """The final best latency, written at the curve's last point (log axis: y as a power of ten)."""
    return {"x": x, "y": math.log10(best_us), "text": f"best {best_us:,.1f} us", "showarrow": True, "arrowhead": 2,
            "ax": -50, "ay": -28, "font": {"size": 11, "color": BEST_COLOUR}, "bgcolor": "rgba(255,255,255,0.85)"}


def best_so_far_figure(curves: pd.DataFrame, task: str, x: str = "evaluation",
                       references: Mapping[str, float | None] | None = None) -> go.Figure:
    """Best-so-far latency of one task against `x` ("evaluation" or "elapsed_s"), a step line
    per series of `tables.best_so_far` (islands thin in palette colours, all islands bold
    black), on a log axis whose range covers the all-islands curve and the references near it
    (`scales.latency_scale`); a horizontal line per known reference latency (baseline, library,
    PyTorch eager, torch.compile, roofline) in grey or black, each named with its value in the legend and a
    far one also at the plot's edge; the final best latency written at its point."""
    mine = curves[curves["task"] == task]
    best = mine[mine["series"] == "all islands"]
    refs = {n: float(v) for n, v in (references or {}).items() if v is not None and v == v and v > 0}
    scale = latency_scale(best["best_us"], refs)
    traces: list[Any] = []
    for series, line in sorted(mine.groupby("series"), key=lambda item: item[0] != "all islands"):
        bold = series == "all islands"
        traces.append(go.Scatter(x=line[x], y=line["best_us"], name=str(series), mode="lines+markers",
                                 line={"shape": "hv", "width": 3 if bold else 1.3,
                                       "color": BEST_COLOUR if bold else series_colour(str(series))},
                                 marker={"size": 4 if bold else 3}))
    span = [0, float(mine[x].max()) if not mine.empty else 1.0]
    for name, value in refs.items():
        dash, colour = REFERENCE_STYLES.get(name.split(" (")[0], ("dot", "#444444"))
        where = {"above": " (above the plot)", "below": " (below the plot)"}.get(scale.off_chart.get(name, ""), "")
        traces.append(go.Scatter(x=span, y=[value, value], mode="lines", name=f"{name} {value:,.1f} us{where}",
                                 line={"dash": dash, "color": colour, "width": 2}, hoverinfo="name"))
    notes = _off_chart_notes(scale, refs)
    if not best.empty:
        notes.append(_best_note(float(best[x].iloc[-1]), float(best["best_us"].iloc[-1])))
    return _figure(traces, f"{task}: best so far against {_title(x)}", {"title": {"text": AXIS_TITLES.get(x, x)}},
                   _log_axis(scale), annotations=notes)


def comparison_figure(curves: pd.DataFrame, task: str, x: str = "evaluation") -> go.Figure:
    """Best-so-far latency of one task in several runs (`curves` has a `run` column holding each
    run's label, device included, and only the "all islands" series), one step line per run,
    named with its final best; the latency range covers every run's curve."""
    mine = curves[curves["task"] == task]
    traces = [go.Scatter(x=line[x], y=line["best_us"], name=f"{run}: best {line['best_us'].iloc[-1]:,.1f} us",
                         mode="lines+markers", line={"shape": "hv", "width": 2, "color": SERIES_COLOURS[i % len(SERIES_COLOURS)]},
                         marker={"size": 4})
              for i, (run, line) in enumerate(mine.groupby("run", sort=False))]
    return _figure(traces, f"{task}: runs compared, against {_title(x)}", {"title": {"text": AXIS_TITLES.get(x, x)}},
                   _log_axis(latency_scale(mine["best_us"])), height=380,
                   legend={"orientation": "h", "y": -0.25, "yanchor": "top", "font": {"size": 10}})


def verdict_figure(mix: pd.DataFrame, task: str) -> go.Figure:
    """The verdict mix of one task over time: a stacked bar per stretch of evaluations (from
    `tables.verdict_mix`), one colour per verdict, a legend even for one verdict, whole-number
    count ticks."""
    mine = mix[mix["task"] == task]
    label = mine["first"].astype(str) + "-" + mine["last"].astype(str)
    order = label[mine["first"].sort_values().index].drop_duplicates().tolist()
    traces = [go.Bar(x=label[bars.index], y=bars["count"], name=str(verdict),
                     marker={"color": VERDICT_COLOURS.get(str(verdict), "#444444")})
              for verdict, bars in mine.groupby("verdict", sort=True)]
    tallest = float(mine.groupby("first")["count"].sum().max()) if not mine.empty else 1.0
    return _figure(traces, f"{task}: verdicts over time",
                   {"title": {"text": "evaluations"}, "type": "category", "categoryorder": "array",
                    "categoryarray": order},
                   {"title": {"text": "evaluations"}, "tick0": 0, "dtick": count_dtick(tallest), "tickformat": "d",
                    "rangemode": "tozero"}, barmode="stack", showlegend=True)


def feature_figure(effects: pd.DataFrame, task: str) -> go.Figure:
    """What paid off for one task: per feature, the geometric-mean speedup over the baseline (or
    PyTorch eager, for a task without one) of correct kernels with it and without it (from
    `kernels.feature_effects`), each bar labelled with how many kernels it is over, features in
    order of effect, on an axis from 0 (a bar's length is its speedup: an axis cut short would
    make a 1.0x bar look many times a 0.6x one)."""
    mine = effects[effects["task"] == task].sort_values("effect", ascending=False)
    over = str(mine["over"].iloc[0]) if not mine.empty else "baseline"
    traces = [
        go.Bar(x=mine["feature"], y=mine[f"speedup_{side}"], name=f"kernels {side.replace('_', ' ')} it",
               text=mine[f"kernels_{side}"].astype(str), textposition="outside", cliponaxis=False,
               hovertext=mine[f"kernels_{side}"].map(lambda n: f"{n} kernels"), marker={"color": colour})
        for side, colour in (("with", "#2ca02c"), ("without", "#aaaaaa"))]
    return _figure(traces, f"{task}: what paid off, kernels with and without each feature (label: how many)",
                   {"type": "category"},
                   {"title": {"text": f"geomean speedup over {over}"}, "rangemode": "tozero", "ticksuffix": "x"},
                   barmode="group")


def tuning_figure(spread: pd.DataFrame, task: str) -> go.Figure:
    """One task's tuning (from `kernels.tuning_bars`): per tunable and value, how much slower
    than each candidate's best trial its trials ran in median (0% = the best), labelled with
    how many correct kernels chose it; a value whose every trial was infeasible is a hatched
    grey bar to the top, labelled so."""
    bars = tuning_bars(spread, task)
    feasible, infeasible = bars[~bars["infeasible"]], bars[bars["infeasible"]]
    top = max(float(feasible["slower_pct"].max()) if not feasible.empty else 0.0, 1.0) * 1.2
    traces: list[Any] = [
        go.Bar(x=rows["label"], y=rows["slower_pct"], name=str(tunable), marker={"color": series_colour(str(i))},
               text=[f"+{p:.1f}%, chosen {n}" for p, n in zip(rows["slower_pct"], rows["chosen"], strict=True)],
               textposition="outside", cliponaxis=False, customdata=rows["trials"],
               hovertemplate="%{x}: %{y:.1f}% slower than the best trial, %{customdata} trials")
        for i, (tunable, rows) in enumerate(feasible.groupby("tunable", sort=True))]
    if not infeasible.empty:
        traces.append(go.Bar(x=infeasible["label"], y=[top] * len(infeasible), name="every trial infeasible",
                             marker={"color": "#eeeeee", "pattern": {"shape": "/", "fgcolor": "#bbbbbb"}},
                             textfont={"color": "#222222", "size": 12},
                             text=infeasible["trials"].map(lambda n: f"infeasible ({n} trials)"),
                             textposition="inside", insidetextanchor="middle", textangle=0,
                             hovertemplate="%{x}: %{text}"))
    order = bars.sort_values(["tunable"], kind="stable")["label"].tolist()
    return _figure(traces, f"{task}: tuning, median trial latency above the candidate's best trial "
                           "(label: kernels that chose it)",
                   {"type": "category", "categoryorder": "array", "categoryarray": order},
                   {"title": {"text": "slower than the best trial (%)"}, "range": [0, top], "ticksuffix": "%"})


def stage_figure(stages: pd.DataFrame) -> go.Figure:
    """Seconds per evaluation in each stage, a stacked horizontal bar per task (from
    `costs.stage_times`), stages in pipeline order; the legend in a row above the bars, so one
    task's short plot does not clip it."""
    traces = [go.Bar(y=bars["task"], x=bars["per_evaluation_s"], name=str(stage), orientation="h")
              for stage, bars in stages.groupby("stage", sort=False)]
    return _figure(traces, "Where an evaluation's time went", {"title": {"text": "seconds per evaluation"}},
                   {"type": "category"}, height=220 + 32 * stages["task"].nunique(), barmode="stack",
                   margin={"l": 60, "r": 20, "t": 80 + TOOLBAR_PX, "b": 50},
                   legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "traceorder": "normal",
                           "font": {"size": 10}})


def occupancy_figure(workers: pd.DataFrame) -> go.Figure:
    """Each worker's share of the run's span spent evaluating candidates, certifying (where it
    certified any) and preparing (starting its GPU child, preparing tasks), stacked, from `costs.worker_occupancy`; a share over 100%,
    impossible, drawn in full with a red line at 100% and labelled so, not cut at the frame."""
    labels = [f"{n} evaluations" + (f" ({flag})" if flag else "")
              for n, flag in zip(workers["evaluations"], workers["flag"], strict=True)]
    traces = [go.Bar(x=workers["worker"], y=workers["evaluating"], name="evaluating", marker={"color": "#1f77b4"},
                     text=labels)]
    if "certifying" in workers and (pd.to_numeric(workers["certifying"], errors="coerce") > 0).any():
        traces.append(go.Bar(x=workers["worker"], y=workers["certifying"], name="certifying",
                             marker={"color": "#2ca02c"}))
    traces.append(go.Bar(x=workers["worker"], y=workers["preparing"], name="preparing", marker={"color": "#ff7f0e"}))
    top = max([1.05, *(float(o) * 1.08 for o in workers["occupancy"])])
    whole = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
              "line": {"color": "#d62728", "dash": "dash", "width": 1.5}}] if top > 1.05 else []
    return _figure(traces, "Where each worker's time went", {"type": "category"},
                   {"title": {"text": "share of the run"}, "tickformat": ".0%", "range": [0, top]}, height=300,
                   barmode="stack", shapes=whole)
