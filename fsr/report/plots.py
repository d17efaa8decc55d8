"""The report's figures: each a small function from a table of fsr.report (already shaped, see
tables.py, kernels.py, costs.py) to a plotly Figure. Nothing here computes a figure's data.

Each figure is built in one constructor call from traces and a layout dict: plotly validates on
every update, and its named templates are deep-copied into each figure, which made those the
larger part of a page's build time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import plotly.graph_objects as go

VERDICT_COLOURS = {
    "OK": "#2ca02c", "COMPILE_ERROR": "#7f7f7f", "REJECTED": "#bcbd22", "LAUNCH_ERROR": "#9467bd",
    "WRONG": "#d62728", "CRASH": "#8c564b", "TIMEOUT": "#ff7f0e", "SUSPECT": "#e377c2",
}
REFERENCE_STYLES = {  # line dash and colour of each reference latency
    "baseline": ("dot", "#7f7f7f"), "library": ("dash", "#1f77b4"), "PyTorch eager": ("dashdot", "#ff7f0e"),
    "device ceiling": ("longdash", "#d62728"),
}
AXIS_TITLES = {"evaluation": "evaluations (all islands)", "elapsed_s": "wall time since the run began (s)"}
AXIS_STYLE = {"gridcolor": "#e5e5e5", "zerolinecolor": "#cccccc", "linecolor": "#999999", "automargin": True}
# Log axes labelled at 1, 2 and 5 times each power of ten, in full ("200", "5k"), not as bare digits.
LOG_AXIS = {"type": "log", "dtick": "D2", "tickformat": "~s"}


def _figure(traces: list[Any], title: str, x: Mapping[str, Any], y: Mapping[str, Any], height: int = 360,
            **layout: Any) -> go.Figure:
    return go.Figure(data=traces, layout={
        "title": {"text": title, "font": {"size": 14}, "x": 0.01, "xanchor": "left"}, "height": height,
        "template": "none", "margin": {"l": 60, "r": 20, "t": 50, "b": 50}, "plot_bgcolor": "white", "paper_bgcolor": "white",
        "legend": {"font": {"size": 10}}, "xaxis": {**AXIS_STYLE, **x}, "yaxis": {**AXIS_STYLE, **y}, **layout})


def _title(x: str) -> str:
    return AXIS_TITLES.get(x, x).split(" (")[0]


def best_so_far_figure(curves: pd.DataFrame, task: str, x: str = "evaluation",
                       references: Mapping[str, float | None] | None = None) -> go.Figure:
    """Best-so-far latency of one task against `x` ("evaluation" or "elapsed_s"), a step line
    per series of `tables.best_so_far` (islands thin, all islands bold black), on a log axis,
    with a horizontal line per known reference latency (baseline, library, PyTorch eager,
    device ceiling) across the plot."""
    mine = curves[curves["task"] == task]
    traces: list[Any] = []
    for series, line in mine.groupby("series", sort=True):
        bold = series == "all islands"
        traces.append(go.Scatter(x=line[x], y=line["best_us"], name=str(series), mode="lines+markers",
                                 line={"shape": "hv", "width": 3 if bold else 1.2, **({"color": "black"} if bold else {})},
                                 marker={"size": 4 if bold else 3}))
    span = [0, float(mine[x].max()) if not mine.empty else 1.0]
    for name, value in (references or {}).items():
        if value is not None and value == value and value > 0:
            dash, colour = REFERENCE_STYLES.get(name, ("dot", "#444444"))
            traces.append(go.Scatter(x=span, y=[value, value], mode="lines", name=f"{name} {value:,.1f} us",
                                     line={"dash": dash, "color": colour, "width": 1.5}, hoverinfo="name"))
    return _figure(traces, f"{task}: best so far against {_title(x)}", {"title": {"text": AXIS_TITLES.get(x, x)}},
                   {"title": {"text": "best latency so far (us)"}, **LOG_AXIS})


def comparison_figure(curves: pd.DataFrame, task: str, x: str = "evaluation") -> go.Figure:
    """Best-so-far latency of one task in several runs (`curves` has a `run` column holding each
    run's label, device included, and only the "all islands" series), one step line per run."""
    traces = [go.Scatter(x=line[x], y=line["best_us"], name=str(run), mode="lines+markers",
                         line={"shape": "hv", "width": 2}, marker={"size": 4})
              for run, line in curves[curves["task"] == task].groupby("run", sort=False)]
    return _figure(traces, f"{task}: runs compared, against {_title(x)}", {"title": {"text": AXIS_TITLES.get(x, x)}},
                   {"title": {"text": "best latency so far (us)"}, **LOG_AXIS}, height=420,
                   legend={"orientation": "h", "y": -0.3, "font": {"size": 10}})


def verdict_figure(mix: pd.DataFrame, task: str) -> go.Figure:
    """The verdict mix of one task over time: a stacked bar per stretch of evaluations (from
    `tables.verdict_mix`), one colour per verdict."""
    mine = mix[mix["task"] == task]
    label = mine["first"].astype(str) + "-" + mine["last"].astype(str)
    order = label[mine["first"].sort_values().index].drop_duplicates().tolist()
    traces = [go.Bar(x=label[bars.index], y=bars["count"], name=str(verdict),
                     marker={"color": VERDICT_COLOURS.get(str(verdict), "#444444")})
              for verdict, bars in mine.groupby("verdict", sort=True)]
    return _figure(traces, f"{task}: verdicts over time",
                   {"title": {"text": "evaluations"}, "type": "category", "categoryorder": "array",
                    "categoryarray": order}, {"title": {"text": "evaluations"}}, barmode="stack")


def feature_figure(effects: pd.DataFrame, task: str) -> go.Figure:
    """What paid off for one task: per feature, the geometric-mean speedup over the baseline of
    correct kernels with it and without it (from `kernels.feature_effects`), on a log axis,
    features in order of effect."""
    mine = effects[effects["task"] == task].sort_values("effect", ascending=False)
    traces = [
        go.Bar(x=mine["feature"], y=mine["speedup_with"], name="kernels with it",
               hovertext=mine["kernels_with"].map(lambda n: f"{n} kernels"), marker={"color": "#2ca02c"}),
        go.Bar(x=mine["feature"], y=mine["speedup_without"], name="kernels without it",
               hovertext=mine["kernels_without"].map(lambda n: f"{n} kernels"), marker={"color": "#aaaaaa"}),
    ]
    return _figure(traces, f"{task}: what paid off, kernels with and without each feature",
                   {"type": "category"}, {"title": {"text": "geomean speedup over baseline"}, **LOG_AXIS},
                   barmode="group")


def tuning_figure(spread: pd.DataFrame, task: str) -> go.Figure:
    """One task's tuning: per tunable and value, the median latency of its trials relative to
    each candidate's best trial (1 = best), labelled with how many correct kernels chose it."""
    mine = spread[spread["task"] == task]
    traces = [go.Bar(x=tunable + "=" + bars["value"].astype(str), y=bars["median_ratio"], name=str(tunable),
                     text=bars["chosen"].map(lambda n: f"chosen {n}"), customdata=bars["trials"],
                     hovertemplate="%{x}: %{y:.2f}x the best trial, %{customdata} trials")
              for tunable, bars in mine.groupby("tunable", sort=True)]
    return _figure(traces, f"{task}: tuning, trial latency per value (label: kernels that chose it)",
                   {"type": "category"}, {"title": {"text": "latency / candidate's best trial"}})


def stage_figure(stages: pd.DataFrame) -> go.Figure:
    """Seconds per evaluation in each stage, a stacked horizontal bar per task (from
    `costs.stage_times`)."""
    traces = [go.Bar(y=bars["task"], x=bars["per_evaluation_s"], name=str(stage), orientation="h")
              for stage, bars in stages.groupby("stage", sort=False)]
    return _figure(traces, "Where an evaluation's time went", {"title": {"text": "seconds per evaluation"}},
                   {"type": "category"}, height=140 + 50 * stages["task"].nunique(), barmode="stack")


def occupancy_figure(workers: pd.DataFrame) -> go.Figure:
    """Each worker's occupancy (evaluating over the run's span), from `costs.worker_occupancy`."""
    traces = [go.Bar(x=workers["worker"], y=workers["occupancy"], marker={"color": "#1f77b4"},
                     text=workers["evaluations"].map(lambda n: f"{n} evaluations"))]
    return _figure(traces, "Occupancy per worker", {"type": "category"},
                   {"title": {"text": "occupancy"}, "tickformat": ".0%", "range": [0, 1.05]}, height=300)
