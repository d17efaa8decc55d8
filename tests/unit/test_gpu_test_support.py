"""What the GPU tests' evaluators share (tests/support/gpu_evaluators.py), checked without a GPU: a
task held to its test sizes times at its largest one, and candidates compiled ahead are found in
the evaluator's compile cache, while a candidate the static stage refuses is not compiled."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fsr import candidate, tasks
from fsr.config import Config
from fsr.evaluate.compile import CompileService
from tests.support.gpu_evaluators import at_test_sizes, precompile, spec
from tests.support.paths import ADVERSARIAL
from tests.support.templates import extremes, sample


@pytest.mark.parametrize("name", ["attention", "sgemm", "scan", "spmv_csr"])
def test_a_task_at_its_test_sizes_times_at_the_largest(name):
    task = tasks.load(name)
    small = at_test_sizes(task)
    largest = max(tasks.input_elements(task, dict(s)) for s in task.test_sizes)
    assert small.bench_size in task.test_sizes and tasks.input_elements(task, dict(small.bench_size)) == largest
    assert largest < tasks.input_elements(task, dict(task.bench_size))
    assert small.test_sizes == task.test_sizes and small.content_hash == task.content_hash


class Counting(CompileService):
    """Counts the compiles that missed the caches, keeping what any of them raised."""

    def __init__(self) -> None:
        super().__init__()
        self.misses = 0
        self.raised: list[str] = []

    def _miss(self, source, kernels, options):
        self.misses += 1
        try:
            return super()._miss(source, kernels, options)
        except Exception as e:
            self.raised.append(repr(e)[:400])
            raise


def test_candidates_compiled_ahead_are_cache_hits_and_refused_ones_are_not_compiled():
    softmax = tasks.load("softmax")
    device = SimpleNamespace(arch="sm_90")
    compiler = Counting()
    evaluator = SimpleNamespace(device=lambda: device, spec=spec(Config(), ("softmax",)), compiler=compiler)
    good = [candidate.with_defines(candidate.parse(softmax.baseline_source, softmax), {"BLOCK": b}) for b in (128, 256)]
    refused = candidate.parse((ADVERSARIAL / "softmax" / "include_file.cu").read_text(), softmax)
    precompile(evaluator, good + [refused])  # type: ignore[arg-type]
    assert compiler.misses == 2, compiler.raised  # the include was refused by the guards before any compile
    for cand in good:
        compiler.compile(cand, device.arch)
    assert compiler.misses == 2, compiler.raised  # what the evaluation compiles next is already there


def test_what_an_evaluator_compiled_ahead_is_not_taken_through_its_static_stage_again(monkeypatch):
    """A module fixture that builds again (its tests run task by task between other modules')
    compiles ahead only the candidates its evaluator has not had."""
    from fsr.evaluate import static

    staged: list[str] = []
    monkeypatch.setattr(static, "static_stage", lambda cand, task, arch, compiler: staged.append(cand.id))
    softmax = tasks.load("softmax")

    class Evaluator:  # an evaluator's stand-in, weakly referable as one is
        spec = spec(Config(), ("softmax",))
        compiler = None

        def device(self):
            return SimpleNamespace(arch="sm_90")

    first, second = Evaluator(), Evaluator()
    one, two = (candidate.with_defines(candidate.parse(softmax.baseline_source, softmax), {"BLOCK": b}) for b in (128, 256))
    precompile(first, [one, one])  # type: ignore[arg-type]
    precompile(first, [one, two])  # type: ignore[arg-type]
    precompile(second, [one])  # type: ignore[arg-type]
    assert staged == [one.id, two.id, one.id]  # each once an evaluator


def test_the_gpu_sample_is_split_at_the_switch_extremes():
    """The bench-size module takes the extremes of the sample, the test-size module the rest: the
    two together are the whole sample, as one module checked it before."""
    for name in ("sgemm", "scan", "softmax"):
        task = tasks.load(name)
        template = candidate.parse(task.template_source or "", task)
        whole = sample(template, 1, 4)
        ends = [v for v in whole if v in extremes(template)]
        rest = [v for v in whole if v not in extremes(template)]
        assert ends == extremes(template) and len(ends) + len(rest) == len(whole) and len(rest) >= 1


def _certifications(*medians_us: float | None):
    """A screened softmax (median 100 us, p90 102) and an evaluator that answers its certification
    requests with these medians in turn (None: WRONG on a fresh input)."""
    from dataclasses import replace as _replace

    from fsr import certification
    from fsr.testing.fakes import softmax_task
    from fsr.types import Evaluation, Tier, Timing, Verdict

    task = softmax_task()
    cand = candidate.parse(task.baseline_source or "", task)
    screened = Evaluation(cand.id, "softmax", Verdict.OK, timing=Timing(100.0, 98.0, 102.0, 97.0, (100.0,), 0, 0, 0))
    request = certification.request(cand, screened)
    answers = iter(medians_us)

    class Answering:
        calls = 0

        def evaluate(self, req):
            Answering.calls += 1
            median = next(answers)
            got = Evaluation(req.id, "softmax", Verdict.OK, tier=Tier.CERTIFY, certified=True,
                             timing=Timing(median or 1.0, median or 1.0, median or 1.0, median or 1.0, (median or 1.0,),
                                           0, 0, 0))
            return got if median is not None else _replace(got, verdict=Verdict.WRONG, failed_check="fresh inputs",
                                                           certified=False, timing=None)

    return Answering(), request, screened


def test_a_shared_gpu_certifies_again_where_timing_alone_failed_and_a_cheat_fails_every_round():
    from fsr.types import Verdict
    from tests.support.certifying import SHARED_ROUNDS, certified

    ev, request, screened = _certifications(110.0, 101.0)  # one slow reading beside other workers, then honest
    assert certified(ev, request, screened, sharers=6).verdict == Verdict.OK and ev.calls == 2
    ev, request, screened = _certifications(110.0, 101.0)
    got = certified(ev, request, screened, sharers=1)  # alone: one round decides, as in fsr
    assert got.verdict == Verdict.UNCERTIFIED and got.failed_check == "timing" and ev.calls == 1
    ev, request, screened = _certifications(*[120.0] * SHARED_ROUNDS)  # slower on fresh inputs every time
    got = certified(ev, request, screened, sharers=6)
    assert got.verdict == Verdict.UNCERTIFIED and got.failed_check == "timing" and ev.calls == SHARED_ROUNDS
    ev, request, screened = _certifications(None, 101.0)  # a wrong answer is final, shared or not
    assert certified(ev, request, screened, sharers=6).verdict == Verdict.WRONG and ev.calls == 1
