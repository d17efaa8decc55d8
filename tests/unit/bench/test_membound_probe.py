"""bench/membound_probe.py's plans name only their templates' switches and tunables, at values
the templates list, and each task's plan starts from the earlier best and tries every newer switch;
a mistake on the command line is one line and exit 2, before any GPU work. The combinations
compile (tests/unit/tasks/test_membound_templates.py compiles the switches; the probe itself is
for a GPU)."""

from __future__ import annotations

import importlib.util

import pytest

from fsr import candidate, tasks
from tests.support.paths import ROOT

SPEC = importlib.util.spec_from_file_location("membound_probe", ROOT / "bench" / "membound_probe.py")
probe = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(probe)
NEW = {"EVICT_HINT", "CHUNK", "REG_ROW", "WIDE"}


@pytest.mark.parametrize("name", list(probe.PLANS))
def test_plans_use_the_templates_own_values_and_every_new_switch(name):
    task = tasks.load(name)
    template = candidate.parse(task.template_source or "", task)
    allowed = {x.name: set(x.values) for x in template.features + template.tunables}
    plan = probe.PLANS[name]
    assert 5 <= len(plan) <= 8 and len({tuple(sorted(v.items())) for _, v in plan}) == len(plan)
    for label, values in plan:
        for key, value in values.items():
            assert value in allowed.get(key, ()), (label, key, value)
    assert not NEW & set(plan[0][1])  # the base: the earlier best
    used = set().union(*(v for _, v in plan)) & NEW
    assert used == NEW & set(allowed), (name, used)


@pytest.mark.parametrize(("argv", "said"), [
    (["softmax"], "unknown task softmax"),
    (["--rounds", "0", "gemv"], "--rounds must be 1 or more"),
])
def test_bad_arguments_are_one_line_and_exit_2(capsys, argv, said):
    assert probe.main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1
