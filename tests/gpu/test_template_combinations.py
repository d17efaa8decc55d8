"""Every task's feature template on a real GPU at the benchmark size: every switch off and every
switch on (tunables at their defaults) is OK at every test size and the benchmark size. The seeded
whole combinations of the same sample are checked at the test sizes (test_template_samples.py);
tests/unit/tasks/test_templates.py compiles a larger sample without a GPU. "Every combination is a
correct kernel" is what the offline search relies on when it draws one."""

from __future__ import annotations

import pytest

from fsr import candidate, tasks
from fsr.types import Verdict
from tests.support.gpu_evaluators import precompile
from tests.support.templates import extremes, sample
from tests.support.xdist_gpus import run_params

pytestmark = pytest.mark.gpu
RANDOM_PER_TASK = 4
SEED = 1


def template(name: str):
    task = tasks.load(name)
    return candidate.parse(task.template_source or "", task)


# the sample's switch extremes (its seeded combinations: test_template_samples.py)
CASES = [(name, values) for name in tasks.list_tasks() if tasks.load(name).template_source
         for values in sample(template(name), SEED, RANDOM_PER_TASK) if values in extremes(template(name))]


@pytest.fixture(scope="module")
def evaluator(request, bench_evaluator):
    """The session's evaluator of every task at the benchmark size (torch.compile off: no figure of
    it is read here), the combinations of this worker's run of the module compiled ahead."""
    precompile(bench_evaluator, [candidate.with_defines(template(name), values)
                                 for name, values in run_params(request, "name", "values")])
    return bench_evaluator


@pytest.mark.parametrize("name,values", CASES,
                         ids=[f"{n}-{'-'.join(f'{k}{v}' for k, v in sorted(c.items()))}" for n, c in CASES])
def test_template_combination_is_ok(evaluator, name, values):
    task = tasks.load(name)
    cand = candidate.with_defines(candidate.parse(task.template_source, task), values)
    result = evaluator.evaluate(cand, tune=False)
    assert result.verdict == Verdict.OK, f"{name} {values}: {result.verdict} {result.message[:400]}"
