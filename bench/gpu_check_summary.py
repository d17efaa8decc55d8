"""bench/gpu_check.py's results: pytest's outcomes (from its JUnit XML, or from its -v lines when a
step was cut before pytest wrote it), the gates' figures (bench/scale.py --json), their ratio, the
printed summary and whether the call failed."""

from __future__ import annotations

import json
import re
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

SLOWEST = 10
OUTCOME = re.compile(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
NODE = re.compile(r"(\S+\.py::\S+)")
SPREAD = re.compile(r"\d+ workers? \[(\d+) items?\]")
SELECTED = re.compile(r"collected \d+ items? / \d+ deselected / (\d+) selected")
COLLECTED = re.compile(r"collected (\d+) items?\b(?! /)")


def junit_results(path: Path) -> dict[str, Any] | None:
    """Outcomes and the slowest tests from pytest's JUnit XML; None if there is none."""
    if not path.is_file():
        return None
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures, times = [], []
    for case in ET.parse(path).getroot().iter("testcase"):
        node = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag for child in case}
        kind = "failed" if "failure" in kinds else "errors" if "error" in kinds else "skipped" if "skipped" in kinds \
            else "passed"
        counts[kind] += 1
        if kind in ("failed", "errors"):
            failures.append(node)
        if kind != "skipped":
            times.append((float(case.get("time") or 0.0), node))
    slowest = [{"test": node, "s": round(t, 1)} for t, node in sorted(times, reverse=True)[:SLOWEST]]
    return {**counts, "failures": failures, "slowest": slowest}


def log_results(text: str) -> dict[str, Any]:
    """Outcomes read from pytest's -v lines, for a run cut before it wrote its XML."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures, seen = [], set()
    for line in text.splitlines():
        outcome, node = OUTCOME.search(line), NODE.search(line)
        if not outcome or not node or (node.group(1), outcome.group(1)) in seen:
            continue
        seen.add((node.group(1), outcome.group(1)))
        kind = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "errors"}.get(outcome.group(1),
                                                                                                "skipped")
        counts[kind] += 1
        if kind in ("failed", "errors"):
            failures.append(node.group(1))
    return {**counts, "failures": failures, "slowest": []}


def selected(text: str) -> int | None:
    """How many tests the step selected, from pytest's log: xdist's "N workers [M items]", else
    "collected N items / D deselected / M selected" or "collected M items"; None if it says none."""
    found = SPREAD.search(text) or SELECTED.search(text) or COLLECTED.search(text)
    return int(found.group(1)) if found else None


def not_started(step: dict[str, Any]) -> int:
    """The step's selected tests that never reported (a session timeout stopped them)."""
    ran = sum(step.get(k, 0) for k in ("passed", "failed", "errors", "skipped"))
    return max(0, (step.get("selected") or 0) - ran)


def gate_figures(path: Path) -> dict[str, Any] | None:
    """bench/scale.py's --json figures, or None."""
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def ratio(summary: dict[str, Any]) -> float | None:
    """The working tree's evaluations per GPU-minute over the ref's."""
    tree, ref = (summary["gates"].get(k) or {} for k in ("tree", "ref"))
    if tree.get("per_gpu_minute") and ref.get("per_gpu_minute"):
        return float(tree["per_gpu_minute"]) / float(ref["per_gpu_minute"])
    return None


def lines(summary: dict[str, Any]) -> list[str]:
    """The printed summary."""
    out = [f"gpu_check: {summary['layout']} (tree {summary['commits'].get('tree', '?')}, "
           f"ref {summary['commits'].get('ref', '?')}), {summary['wall_s']:.0f} s"]
    for name, step in summary["tests"].items():
        cut = f", cut at {step['limit_s']:.0f} s" if step.get("cut") else ""
        cut += f", pytest exit {step['returncode']} (log: {step['log']})" if step["returncode"] not in (0, 1, 5) else ""
        unstarted = not_started(step)
        cut += f", {unstarted} not started" if unstarted else ""
        out.append(f"tests ({name}): {step['passed']} passed, {step['failed']} failed, {step['errors']} errors, "
                   f"{step['skipped']} skipped in {step['wall_s']:.0f} s on GPU {','.join(step['gpus'])}{cut}")
        out += [f"  FAILED {node}" for node in step["failures"][:20]]
        out += [f"  {s['s']:6.1f} s  {s['test']}" for s in step["slowest"][:5]]
    for tree in ("tree", "ref"):
        gate = summary["gates"].get(tree)
        if gate is None:
            continue
        if "per_gpu_minute" in gate:
            out.append(f"gate ({tree}, {gate['label']}): {gate['per_gpu_minute']:.1f} evaluations per GPU-minute, "
                       f"preparing {gate['preparing_share']:.0%}, {gate['evaluations']} evaluations in "
                       f"{gate['wall_s']:.0f} s (--max-wall {gate['max_wall_s']:.0f})")
            out += certification_lines(gate)
        else:
            out.append(f"gate ({tree}): no figures ({gate.get('error', 'see its log')})")
    if summary.get("ratio") is not None:
        out.append(f"ratio (tree / ref, evaluations per GPU-minute): {summary['ratio']:.3f}")
    return out + [f"note: {n}" for n in summary["notes"]]


def certification_lines(gate: dict[str, Any]) -> list[str]:
    """A gate's certifications (bench/scale.py's `certified` figures) in one line: how many, which
    failed where, and how the bests and the certifications' pairs held; none where it certified
    nothing."""
    certified = gate.get("certified") or {}
    if not gate.get("certifications"):
        return []
    failed = certified.get("failed") or {}
    words = "; ".join(f"{task}: {at}" for task, at in failed.items()) or "none failed"
    parts = [f"  certifications: {gate['certifications']}, {words}"]
    for key, what in (("certified_over_screened", "the bests as certified over screened"),
                      ("fresh_over_screening_sets", "fresh inputs over the screening's sets")):
        values = sorted((certified.get(key) or {}).values())
        if values:
            parts.append(f"{what}: median {statistics.median(values):.3f}, at most {values[-1]:.3f}")
    return ["; ".join(parts)]


def failed(summary: dict[str, Any]) -> bool:
    """Whether a test failed or a step did not finish: a test step cut short or ended by anything
    but its tests (pytest's 0, or 5 where it had none), a gate without figures."""
    steps = summary["tests"].values()
    return (any(s["failed"] or s["errors"] or s["cut"] or s["returncode"] not in (0, 5) for s in steps)
            or any("error" in gate for gate in summary["gates"].values()))
