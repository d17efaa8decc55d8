"""Every task's baseline, every feature template combination and the examples parse and compile
for sm_90 with NVRTC (no GPU needed), within the resources every launch must fit: registers x
threads and static + dynamic shared memory per block, at every test size and the bench size,
and without register spills except where a feature caps the registers on purpose.

Template combinations checked: every feature combination with default tunables, every tunable
combination with default features, and every tunable combination with every feature on.
"""

from __future__ import annotations

import itertools
import math
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fsr import candidate, tasks
from fsr.evaluate.compile import CompileFailed, compile_candidate
from fsr.types import Candidate, Task

ARCH = "sm_90"
ROOT = Path(__file__).resolve().parents[2]
TASKS = tuple(tasks.list_tasks())  # every built-in task has a template
REGS_PER_BLOCK = 65536
SMEM_PER_BLOCK = 48 * 1024  # without an opt-in: what every template must stay within


def combinations(cand: Candidate) -> list[dict[str, int]]:
    """Feature product at default tunables, tunable product at default and at all-on features."""
    features, tunables = cand.features, cand.tunables
    out = [dict(zip([f.name for f in features], values, strict=True)) for values in itertools.product(*[f.values for f in features])]
    all_on = {f.name: max(f.values) for f in features}
    for values in itertools.product(*[t.values for t in tunables]):
        chosen = dict(zip([t.name for t in tunables], values, strict=True))
        out += [chosen, all_on | chosen]
    unique = {tuple(sorted(d.items())): d for d in out}
    return list(unique.values())


def spills_allowed(task: str, values: dict[str, int]) -> bool:
    """SGEMM's LAUNCH_BOUNDS caps registers at 128 (two 256-thread blocks per SM); with 32 or 64
    accumulators a thread the compiler may spill a little. Nowhere else."""
    return (task == "sgemm" and values.get("LAUNCH_BOUNDS") == 1 and values.get("REG_BLOCK") == 1
            and values.get("TM", 8) * values.get("TN", 8) >= 32)


def problems(task: Task, cand: Candidate, values: dict[str, int]) -> list[str]:
    """Why this combination would not compile or launch at some size; empty if it would."""
    one = candidate.with_defines(cand, values)
    try:
        compiled = compile_candidate(one, ARCH)
    except CompileFailed as e:
        return [f"{values}: compile error\n{e.log[:3000]}"]
    out = []
    for name, res in compiled.kernel_resources:
        if res.spill_bytes and not spills_allowed(task.name, dict(one.resolved_defines())):
            out.append(f"{values}: {name} spills {res.spill_bytes} bytes")
        for size in task.test_sizes + (task.bench_size,):
            for launch, (grid, block, smem) in zip(one.launches, candidate.launch_dims(one, dict(size)), strict=True):
                if launch.kernel != name:
                    continue
                threads = math.prod(block)
                if any(g > 65535 for g in grid[1:]):
                    out.append(f"{values}: {name} grid {grid} at {size}")
                if threads > 1024 or res.registers * threads > REGS_PER_BLOCK:
                    out.append(f"{values}: {name} {threads} threads x {res.registers} registers")
                if res.smem_static_bytes + smem > SMEM_PER_BLOCK:
                    out.append(f"{values}: {name} {res.smem_static_bytes} + {smem} bytes of shared memory at {size}")
    return out


def check_all(task: Task, cand: Candidate, combos: list[dict[str, int]]) -> None:
    # NVRTC releases the GIL: compiles run in parallel threads.
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 2)) as pool:
        found = [p for ps in pool.map(lambda v: problems(task, cand, v), combos) for p in ps]
    assert not found, f"{len(found)} problem(s):\n" + "\n".join(found[:10])


@pytest.mark.parametrize("name", TASKS)
def test_baseline_compiles_at_every_tunable_value(name):
    task = tasks.load(name)
    cand = candidate.parse(task.baseline_source, task)
    assert not cand.features
    check_all(task, cand, combinations(cand))


@pytest.mark.parametrize("name", TASKS)
def test_template_declares_switches_and_tunables(name):
    task = tasks.load(name)
    cand = candidate.parse(task.template_source, task)
    assert len(cand.features) >= 6 and cand.tunables
    for f in cand.features:
        assert f.name.isupper() and f.values[0] == 0, f"{f.name}: off (0) must be the default"
    # the header says what each switch does, on its own line
    header = candidate.HEADER_RE.search(task.template_source).group(1)
    for f in cand.features:
        line = next(ln for ln in header.splitlines() if ln.strip().startswith(f"{f.name} ="))
        assert "#" in line and len(line.split("#", 1)[1].strip()) > 10, f"{f.name}: no comment"


@pytest.mark.parametrize("name", TASKS)
def test_every_template_combination_compiles_and_fits(name):
    task = tasks.load(name)
    cand = candidate.parse(task.template_source, task)
    combos = combinations(cand)
    assert len(combos) >= 2 ** len(cand.features)
    check_all(task, cand, combos)


def test_softmax_fast_example_compiles_without_spills():
    task = tasks.load("softmax")
    cand = candidate.parse((ROOT / "examples" / "softmax_fast.cu").read_text(), task)
    assert [t.name for t in cand.tunables] == ["BLOCK"]
    check_all(task, cand, combinations(cand))


def test_template_features_are_seen_only_when_switched_on():
    # The feature policy learns from what the detectors see: a template switch that is off must
    # leave no trace of its feature in the active source.
    features = pytest.importorskip("fsr.propose.features")
    for name in TASKS:
        task = tasks.load(name)
        cand = candidate.parse(task.template_source, task)
        switches = [f.name for f in cand.features if features.feature_name(f.name) in features.NAMES]
        for switch in switches:
            others_on = {f.name: 1 for f in cand.features} | {switch: 0}
            defines = dict(candidate.with_defines(cand, others_on).resolved_defines())
            seen = features.detect_source(task.template_source, defines)
            assert features.feature_name(switch) not in seen, f"{name}: {switch} off but detected"
