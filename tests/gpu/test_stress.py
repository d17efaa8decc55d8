"""Stress sets on a real GPU (docs/judge.md, "Stress sets"): a kernel that drops a step fsr's usual
inputs never need (softmax without the row maximum, layer norm's variance as E[x^2] - mean^2 in
one pass, an RMS norm without eps: tests/adversarial/certify/softmax/no_row_max.cu,
layernorm/one_pass_variance.cu, rmsnorm/no_eps.cu) is
right on every screened input and fails certification at the stress set that needs the step; its
honest twin, each task's baseline and a covering sample of its template's switch
settings pass every stress set on several entropy draws.

The tasks are held to their test sizes (tests.support.gpu_evaluators.at_test_sizes): the stress
sets are at test sizes, and a certification's benchmark set is then cheap to build."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fsr import candidate, certification, tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Evaluation, Tier, Verdict, WorkerSpec
from tests.adversarial.corpus import certification_channels
from tests.support.gpu_evaluators import at_test_sizes, precompile
from tests.support.templates import sample
from tests.support.xdist_gpus import host_threads, shared_budget

pytestmark = pytest.mark.gpu

STRESSED = [name for name in tasks.list_tasks() if tasks.load(name).stress]
DRAWS = 3  # entropy draws of every stress set for each honest kernel
SAMPLE = 4  # template switch settings per task, beside its default and its baseline

# The corpus's kernels that drop such a step (tests/adversarial/certify/, caught by stress-set),
# each with its honest twin: (task, cheat's source, twin's source)
CHEATS = [(c.task, c.path.read_text(), t.path.read_text()) for c, t in certification_channels() if "stress-set" in c.caught_by]
assert {name for name, _, _ in CHEATS} >= {"softmax", "layernorm", "rmsnorm"}, "the corpus lost a stress-set cheat"


def honest_kernels() -> list[tuple[str, dict[str, int] | None]]:
    """Each stressed task's baseline (None) and template default ({}) and a seeded sample of its
    template's settings."""
    cases: list[tuple[str, dict[str, int] | None]] = []
    for name in STRESSED:
        task = tasks.load(name)
        cases.append((name, None))
        if task.template_source:
            template = candidate.parse(task.template_source, task)
            cases += [(name, {})] + [(name, values) for values in sample(template, 1, SAMPLE)]
    return cases


HONEST = honest_kernels()


def kernel(task: tasks.Task, values: dict[str, int] | None) -> candidate.Candidate:
    if values is None:
        return candidate.parse(task.baseline_source, task)
    return candidate.with_defines(candidate.parse(task.template_source or "", task), values)


@pytest.fixture(scope="module")
def evaluator(contents_dir: Path) -> Iterator[GpuEvaluator]:
    small = [at_test_sizes(tasks.load(name)) for name in sorted(set(STRESSED) | {n for n, _, _ in CHEATS})]
    config = Config(eval=EvalConfig(torch_compile="off", host_threads=host_threads(),
                                    prepared_max_bytes=shared_budget(), contents_cache_dir=str(contents_dir)),
                    tune=TuneConfig(trials=0))
    ev = GpuEvaluator(WorkerSpec.of(config, small, warm=True))
    precompile(ev, [kernel(ev.spec.task(n), v) for n, v in HONEST]  # type: ignore[arg-type]
               + [candidate.parse(src, ev.spec.task(n)) for n, cheat, twin in CHEATS for src in (cheat, twin)])  # type: ignore[arg-type]
    yield ev
    ev.close()


def screen_and_certify(ev: GpuEvaluator, cand: candidate.Candidate, draws: int = 1) -> tuple[Evaluation, list[Evaluation]]:
    screened = ev.evaluate(cand, tune=False)
    assert screened.verdict == Verdict.OK, f"{cand.task}: screened {screened.verdict}: {screened.message[:400]}"
    got = []
    for _ in range(draws):
        request = certification.request(cand, screened)
        result = ev.evaluate(request)
        assert result.tier == Tier.CERTIFY and result.candidate_id == request.id
        got.append(result)
    return screened, got


@pytest.mark.parametrize("name,cheat,twin", CHEATS, ids=[c[0] for c in CHEATS])
def test_a_kernel_that_drops_a_step_passes_screening_and_fails_at_its_stress_set(evaluator, name, cheat, twin):
    task = evaluator.spec.task(name)
    _, [honest] = screen_and_certify(evaluator, candidate.parse(twin, task))
    assert honest.verdict == Verdict.OK, f"the honest twin failed: {honest.failed_check}: {honest.message[:400]}"
    _, [got] = screen_and_certify(evaluator, candidate.parse(cheat, task))  # screening is fooled
    assert got.verdict == Verdict.UNCERTIFIED and got.failed_check.startswith("stress set "), (got.failed_check,
                                                                                                got.message[:400])
    assert got.failed_check.split(" at ")[0].removeprefix("stress set ") in {s.name for s in task.stress}
    assert "(WRONG)" in got.message


@pytest.mark.parametrize("name,values", HONEST,
                         ids=[f"{n}-{'baseline' if v is None else '-'.join(f'{k}{x}' for k, x in sorted(v.items())) or 'default'}"
                              for n, v in HONEST])
def test_honest_kernels_pass_every_stress_set_on_several_draws(evaluator, name, values):
    task = evaluator.spec.task(name)
    _, results = screen_and_certify(evaluator, kernel(task, values), DRAWS)
    for got in results:
        assert got.verdict == Verdict.OK, f"{got.failed_check}: {got.message[:400]}"
        stressed = got.checks[len(task.test_sizes):len(task.test_sizes) + len(task.stress)]
        assert len(stressed) == len(task.stress) and all(c.passed for c in stressed)
