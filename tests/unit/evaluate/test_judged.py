"""Identity by what runs: a candidate whose compiled program and launch header were judged before
is answered from that judgement, without the GPU child; a new comment is not a new kernel, a new
line of code or other defines are."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from fsr import candidate as cfmt
from fsr import tasks
from fsr.evaluate import judged
from fsr.evaluate.wire import ChildResult, Died
from fsr.testing.fakes import TEMPLATE, softmax_task, timing
from fsr.types import Evaluation, Verdict
from tests.support.stub_child import StubSandbox, stub_evaluator

SOFTMAX = tasks.load("softmax")
BASE = cfmt.parse(SOFTMAX.baseline_source, SOFTMAX)


def commented(source: str) -> str:
    return source.replace("\n", "\n// a model's new comment, and the parent is otherwise unchanged\n", 3)


def ok(cand_id: str, median_us: float = 10.0) -> Evaluation:
    return Evaluation(cand_id, "softmax", Verdict.OK, timing=timing(median_us), tuned_defines=(("BLOCK", 128),),
                      tune_trials=8, verify_s=0.1, tune_s=0.2, bench_s=0.3, wall_s=0.7)


def test_two_sources_differing_only_in_a_comment_are_one_program(compiler) -> None:
    other = replace(BASE, source=commented(BASE.source))
    assert other.id != BASE.id
    a, b = compiler.compile(BASE, "sm_90"), compiler.compile(other, "sm_90")
    assert a.cubin == b.cubin
    assert judged.key(BASE, a, 0) == judged.key(other, b, 0)
    assert judged.key(BASE, a, 8) == judged.key(other, b, 8)  # tuned: the code without comments is the same too


def test_another_program_header_or_define_is_another_judgement(compiler) -> None:
    program = compiler.compile(BASE, "sm_90")
    changed = replace(BASE, source=BASE.source.replace("expf(", "__expf("))
    assert compiler.compile(changed, "sm_90").cubin != program.cubin
    wider = cfmt.with_defines(BASE, {"BLOCK": 512})
    assert judged.key(wider, compiler.compile(wider, "sm_90"), 0) != judged.key(BASE, program, 0)
    relaunched = replace(BASE, launches=(replace(BASE.launches[0], grid=("rows", "1")),))
    assert judged.key(relaunched, program, 0) != judged.key(BASE, program, 0)  # same cubin, other launches
    template = cfmt.parse(SOFTMAX.template_source, SOFTMAX)
    compiled = compiler.compile(template, "sm_90")
    assert judged.key(template, compiled, 8) != judged.key(template, compiled, 0)  # tuned or not
    # nothing to tune (one value of BLOCK): the trials change nothing that runs, so a task's baseline
    # judged untuned in its preparation answers the same baseline sent as a candidate
    assert judged.key(BASE, program, 8) == judged.key(BASE, program, 0)


def test_a_tuned_candidate_whose_other_configurations_changed_is_judged_again(compiler) -> None:
    # a line only the BLOCK=1024 configuration compiles: the default program is unchanged, the
    # tuning would run another program
    task = softmax_task()
    template = cfmt.parse(TEMPLATE, task)
    edited = replace(template, source=template.source.replace(
        "    float inv = 1.0f", "#if BLOCK == 1024\n    mx = mx + 0.0f;\n#endif\n    float inv = 1.0f"))
    a, b = compiler.compile(template, "sm_90"), compiler.compile(edited, "sm_90")
    assert a.cubin == b.cubin
    assert judged.key(template, a, 0) == judged.key(edited, b, 0)  # not tuned: what runs is the same
    assert judged.key(template, a, 8) != judged.key(edited, b, 8)


def test_a_judgement_is_kept_and_answers_the_next_claim() -> None:
    memo = judged.Judgements()
    assert memo.claim("k") is None
    memo.settle("k", ok("first"))
    found = memo.claim("k")
    assert found is not None and found.candidate_id == "first"
    answer = judged.answer(found, replace(BASE, source=commented(BASE.source)), compile_s=0.01)
    assert answer.answered_from == "first" and answer.candidate_id != "first"
    assert (answer.verdict, answer.timing, answer.tuned_defines) == (Verdict.OK, timing(10.0), (("BLOCK", 128),))
    assert (answer.trials, answer.tune_trials, answer.verify_s, answer.tune_s, answer.bench_s) == ((), 0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("verdict", [Verdict.CRASH, Verdict.TIMEOUT])
def test_a_crash_or_a_hang_is_judged_again(verdict: Verdict) -> None:
    memo = judged.Judgements()
    assert memo.claim("k") is None
    memo.settle("k", Evaluation("first", "softmax", verdict, "the GPU child died"))
    assert memo.claim("k") is None


def test_an_abandoned_claim_lets_the_next_call_judge_it() -> None:
    memo = judged.Judgements()
    assert memo.claim("k") is None
    memo.abandon("k")
    assert memo.claim("k") is None


def test_a_call_finding_the_same_program_under_way_waits_for_its_judgement() -> None:
    memo = judged.Judgements()
    assert memo.claim("k") is None
    got: list[Evaluation | None] = []
    waiter = threading.Thread(target=lambda: got.append(memo.claim("k")))
    waiter.start()
    time.sleep(0.05)
    assert not got  # still waiting
    memo.settle("k", ok("first"))
    waiter.join(5)
    assert got and got[0] is not None and got[0].candidate_id == "first"


def test_the_oldest_judgements_are_dropped_past_the_bound() -> None:
    memo = judged.Judgements(max_entries=2)
    for k in ("a", "b", "c"):
        memo.claim(k)
        memo.settle(k, ok(k))
    assert memo.claim("a") is None
    assert memo.claim("c") is not None


def test_the_evaluator_answers_a_recommented_candidate_without_its_gpu_child(compiler) -> None:
    sandbox = StubSandbox()
    evaluator = stub_evaluator(SOFTMAX, compiler, sandbox)
    try:
        first = evaluator.evaluate(BASE)
        judged_on_gpu = sandbox.calls["evaluate"]  # the baseline's, in its task's preparation, answers BASE too
        assert judged_on_gpu == 1 and first.timing is not None and first.baseline_us == first.timing.median_us
        again = evaluator.evaluate(replace(BASE, source=commented(BASE.source)))
        assert sandbox.calls["evaluate"] == judged_on_gpu
        assert first.verdict == again.verdict == Verdict.OK and again.timing == first.timing
        assert again.answered_from == BASE.id and not first.answered_from
        other = evaluator.evaluate(replace(BASE, source=BASE.source.replace("expf(", "__expf(")))
        assert sandbox.calls["evaluate"] == judged_on_gpu + 1 and not other.answered_from
    finally:
        evaluator.close()


def test_the_evaluator_judges_again_a_program_that_crashed(compiler) -> None:
    sandbox = StubSandbox(lambda kind, payload: ChildResult(Verdict.OK, samples_us=(1000.0,))
                          if payload.candidate.id == BASE.id else Died("the GPU child died"))
    evaluator = stub_evaluator(SOFTMAX, compiler, sandbox)
    try:
        cand = cfmt.with_defines(BASE, {"BLOCK": 128})
        assert evaluator.evaluate(cand).verdict == Verdict.CRASH
        before = sandbox.calls["evaluate"]
        assert evaluator.evaluate(replace(cand, source=commented(cand.source))).verdict == Verdict.CRASH
        assert sandbox.calls["evaluate"] == before + 1
    finally:
        evaluator.close()


def test_a_claim_made_again_further_up_the_same_call_does_not_wait_for_itself() -> None:
    # the task's baseline is judged inside the first evaluation's preparation, and may be that
    # evaluation's own candidate
    memo = judged.Judgements(wait_s=30.0)
    assert memo.claim("k") is None
    started = time.perf_counter()
    assert memo.claim("k") is None
    assert time.perf_counter() - started < 1.0
    memo.settle("k", ok("inner"))
    memo.settle("k", ok("outer"))
    found = memo.claim("k")
    assert found is not None and found.candidate_id == "outer"


def test_an_evaluator_that_does_not_remember_judges_every_call(compiler) -> None:
    # fsr eval --repeat times the same kernel again
    sandbox = StubSandbox()
    evaluator = stub_evaluator(SOFTMAX, compiler, sandbox, campaign=False)
    try:
        cand = cfmt.with_defines(BASE, {"BLOCK": 128})
        evaluator.evaluate(cand)
        before = sandbox.calls["evaluate"]
        assert not evaluator.evaluate(cand).answered_from
        assert sandbox.calls["evaluate"] == before + 1
    finally:
        evaluator.close()
