"""Every task's baseline, every feature template combination and the examples parse and compile
for sm_90 with NVRTC (no GPU needed), within the resources every launch must fit: registers x
threads and shared memory per block (static within 48 KiB, with dynamic within sm_90's opt-in
227 KiB), at every test size and the bench size, and without register spills except where a
feature caps the registers on purpose. Every one also passes the static guards, on its source
and on what it compiles to (PTX rules, the module-variable bound): honest code is never refused.

Template combinations checked (CI has two cores, so a sample, not the whole product): all
features off and all on, each feature alone and each left out, a seeded sample of feature
combinations, each value of each tunable with the others at their defaults (features off and all
on; a variant whose template is another task's leaves this sweep to that task), every tunable
at its largest with features off, all on and each alone, and a seeded sample of whole
combinations. Each distinct program is compiled once. Every combination must be correct, so any
one of them may be drawn; the seed is fixed so that a failure repeats.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fsr import candidate, tasks
from fsr.propose.transforms import split
from tests.support.paths import ROOT
from tests.support.templates import (
    check_all,
    combinations,
    program_key,
)

TASKS = tuple(tasks.list_tasks())  # every built-in task has a template

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


def shares_a_template(task: tasks.Task) -> bool:
    """A variant (attention_bf16_causal, gemm_bf16_gelu, the bfloat16 norms and softmax): its
    template lives in another built-in task's folder, whose own test sweeps each tunable value."""
    where = Path(task.template_where)
    return where.parent.name != task.name and where.parent.name in TASKS


@pytest.mark.parametrize("name", TASKS)
def test_every_template_combination_compiles_and_fits(name):
    # A variant compiles the template under one more define (CAUSAL, GELU, the element type): the
    # same sample less the sweep of each tunable value alone, which the template's own task
    # compiles; its tunables at their largest, its switches and a whole-combination sample stay.
    task = tasks.load(name)
    cand = candidate.parse(task.template_source, task)
    combos = combinations(cand, sweep=not shares_a_template(task))
    assert len(combos) >= 2 * len(cand.features) + 2
    check_all(task, cand, combos)


def test_combination_sample_covers_extremes_singles_and_every_tunable_value():
    task = tasks.load("softmax")
    cand = candidate.parse(task.template_source, task)
    defaults = dict(cand.resolved_defines())
    combos = [defaults | c for c in combinations(cand)]
    names = [f.name for f in cand.features]
    assert defaults | {n: 1 for n in names} in combos and defaults in combos  # all on, all off
    for n in names:
        assert defaults | {n: 1} in combos and defaults | {m: 1 for m in names if m != n} in combos, n
    for t in cand.tunables:
        assert {c[t.name] for c in combos} == set(t.values), t.name
    assert combinations(cand) == combinations(cand)  # seeded: a failure repeats
    assert combinations(cand, seed=1) != combinations(cand)


def test_each_program_compiles_once_and_every_combination_of_a_failing_one_is_named():
    # check_all compiles one program per key (the active text and the defines it names); a
    # failure must still be reported for every combination that has it
    task = tasks.load("softmax")
    cand = candidate.parse(task.template_source, task)
    header, body = split(cand.source)
    broken = replace(cand, source=header + "\n#if BLOCK == 512\n#error refused at 512\n#endif" + body)
    combos = [v for v in combinations(broken) if v.get("BLOCK") in (512, None)][:6]
    combos += [v | {"BLOCK": 512} for v in combos[:2]]
    failing = [v for v in combos if v.get("BLOCK") == 512]
    assert len(failing) >= 2
    with pytest.raises(AssertionError) as info:
        check_all(task, broken, combos)
    assert f"{len(failing)} problem(s)" in str(info.value) and "refused at 512" in str(info.value)
    # a tunable at its default, given or left out, is one program; another value of it is another
    default = dict(cand.resolved_defines())["BLOCK"]
    assert program_key(cand, {}) == program_key(cand, {"BLOCK": default})
    assert program_key(cand, {}) != program_key(cand, {"BLOCK": next(v for v in (128, 256) if v != default)})


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
