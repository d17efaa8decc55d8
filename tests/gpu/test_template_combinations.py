"""Every task's feature template on a real GPU: a seeded sample of whole switch-and-tunable
combinations (with every switch off and every switch on) is OK at every test size and the
benchmark size. tests/unit/tasks/test_templates.py compiles a larger sample without a GPU; this runs
some of them, since "every combination is a correct kernel" is what the offline search relies
on when it draws one."""

from __future__ import annotations

import random

import pytest

from fsr import candidate, tasks
from fsr.config import Config, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Candidate, Verdict, WorkerSpec

pytestmark = pytest.mark.gpu
RANDOM_PER_TASK = 4
SEED = 1


def sample(template: Candidate, seed: int) -> list[dict[str, int]]:
    """Every switch off, every switch on (tunables at their defaults), then seeded whole
    combinations of switches and tunables."""
    rng = random.Random(seed)
    out = [{f.name: f.values[0] for f in template.features}, {f.name: max(f.values) for f in template.features}]
    out += [{x.name: rng.choice(x.values) for x in template.features + template.tunables}
            for _ in range(RANDOM_PER_TASK)]
    return list({tuple(sorted(d.items())): d for d in out}.values())


# Paths the sample may miss: scan's bulk-copied tiles at the 96 KiB cap (ITEMS cut to fit, two
# buffers), and three-warp blocks on the register path
PATHS = [("scan", {"SMEM_TILE": 1, "DOUBLE_BUFFER": 1, "BLOCK": 512, "ITEMS": 128}),
         ("scan", {"SMEM_TILE": 1, "BLOCK": 96, "ITEMS": 128, "IN_ORDER": 1, "LOOKBACK_WARP": 1}),
         ("scan", {"STRIPED": 1, "VEC4": 1, "BLOCK": 96, "ITEMS": 96, "LOOKBACK_BLOCK": 1})]

CASES = [(name, values) for name in tasks.list_tasks()
         for values in sample(candidate.parse(tasks.load(name).template_source or "", tasks.load(name)), SEED)
         if tasks.load(name).template_source] + PATHS


@pytest.fixture(scope="module")
def evaluator():
    every = [tasks.load(n) for n in tasks.list_tasks()]
    ev = GpuEvaluator(WorkerSpec.of(Config(tune=TuneConfig(trials=0)), every, warm=True))
    yield ev
    ev.close()


@pytest.mark.parametrize("name,values", CASES,
                         ids=[f"{n}-{'-'.join(f'{k}{v}' for k, v in sorted(c.items()))}" for n, c in CASES])
def test_template_combination_is_ok(evaluator, name, values):
    task = tasks.load(name)
    cand = candidate.with_defines(candidate.parse(task.template_source, task), values)
    result = evaluator.evaluate(cand, tune=False)
    assert result.verdict == Verdict.OK, f"{name} {values}: {result.verdict} {result.message[:400]}"
