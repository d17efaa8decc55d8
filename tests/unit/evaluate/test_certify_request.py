"""The worker's side of certification, its GPU child stood in for: a certification request is
compiled at its tuned defines and sent to the child as a certification (never answered from the
screening's judgement); what the child found becomes OK (certified) or UNCERTIFIED naming the set
or check; the paired timing bound; and which lineage rows count where a campaign certifies."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsr import candidate as cfmt
from fsr import certification, tasks
from fsr.evaluate.wire import Certified, CertifyRequest, ChildResult, Died, TimedOut
from fsr.testing.fakes import timing
from fsr.types import Evaluation, SizeCheck, Tier, Timing, Verdict
from tests.support.lineage_rows import frame, row
from tests.support.stub_child import StubSandbox, stub_evaluator

SOFTMAX = tasks.load("softmax")
BASE = cfmt.parse(SOFTMAX.baseline_source, SOFTMAX)
CANDIDATE = cfmt.with_defines(BASE, {"BLOCK": 128})
SAMPLES = (1000.0, 1010.0, 990.0)


def answering(certify: object):
    """A stand-in child: screenings OK at about 1 ms, certifications answered with `certify`."""
    return StubSandbox(lambda kind, payload: certify if kind == "certify" else ChildResult(Verdict.OK, samples_us=SAMPLES))


def screened_and_certified(compiler, certify: object) -> tuple[Evaluation, Evaluation, StubSandbox]:
    sandbox = answering(certify)
    evaluator = stub_evaluator(SOFTMAX, compiler, sandbox)
    try:
        screened = evaluator.evaluate(CANDIDATE)
        return screened, evaluator.evaluate(certification.request(CANDIDATE, screened)), sandbox
    finally:
        evaluator.close()


def test_a_certification_request_goes_to_the_child_as_one_and_is_never_answered_from_the_screening(compiler) -> None:
    screened, got, sandbox = screened_and_certified(compiler, Certified(Verdict.OK, samples_us=SAMPLES))
    assert screened.tier == Tier.SCREEN and screened.verdict == Verdict.OK
    assert sandbox.calls["certify"] == 1
    (request,) = [p for kind, p in sandbox.payloads if kind == "certify"]
    assert isinstance(request, CertifyRequest) and request.candidate.certify == CANDIDATE.id
    assert dict(request.candidate.resolved_defines())["BLOCK"] == 128 and request.cubin
    assert got.tier == Tier.CERTIFY and got.verdict == Verdict.OK and got.certified is True
    assert got.timing is not None and got.timing.median_us == pytest.approx(1000.0) and not got.answered_from
    assert got.baseline_us is not None  # the comparators as a screening carries them


@pytest.mark.parametrize("reply,check,verdict", [
    (Certified(Verdict.WRONG, "3 of 231 elements wrong", "fresh inputs at rows=7,cols=33",
               (SizeCheck((("rows", 7), ("cols", 33)), False, 2.0, "3 of 231 elements wrong"),)),
     "fresh inputs at rows=7,cols=33", "WRONG"),
    (Certified(Verdict.WRONG, "in timed run 3 (input set 0), 9 of 99 output elements were wrong",
               "timed runs on fresh inputs"), "timed runs on fresh inputs", "WRONG"),
    (Certified(Verdict.WRONG, "in timed run 2 (input set 1), 1 of 99 output elements were wrong",
               "timed runs on the screening inputs"), "timed runs on the screening inputs", "WRONG"),
    (Died("the kernel broke the CUDA context: cudaErrorIllegalAddress"), "crash", "CRASH"),
    (TimedOut(30.5), "timeout", "TIMEOUT"),
    (Certified(Verdict.OK, samples_us=(0.001,)), "plausibility", "SUSPECT"),  # faster than the device allows
])
def test_a_failed_certification_is_uncertified_and_names_the_set_or_check(compiler, reply, check, verdict) -> None:
    _, got, _ = screened_and_certified(compiler, reply)
    assert got.verdict == Verdict.UNCERTIFIED and got.certified is False and got.tier == Tier.CERTIFY
    assert got.failed_check == check
    assert got.message.startswith(f"certification failed at {check} ({verdict}): ")
    assert got.timing is None


@pytest.mark.parametrize("verdict", [Verdict.OK, Verdict.WRONG])
def test_the_seeds_of_the_sets_a_certification_drew_reach_its_evaluation(compiler, verdict) -> None:
    seeds = (("fresh inputs at rows=1,cols=1", 12345), ("timed runs on fresh inputs", 2**62 + 7))
    failed = "timed runs on fresh inputs" if verdict == Verdict.WRONG else ""
    screened, got, _ = screened_and_certified(compiler, Certified(verdict, "wrong" if failed else "", failed,
                                                                  samples_us=SAMPLES, seeds=seeds))
    assert got.certify_seeds == seeds and got.certified is (verdict == Verdict.OK)
    assert screened.certify_seeds == ()


def test_a_certified_time_clearly_slower_than_screened_fails_on_timing() -> None:
    screened = Evaluation("s", "softmax", Verdict.OK, timing=Timing(100.0, 98.0, 102.0, 97.0, (100.0,), 0, 0, 0))
    near = replace(screened, candidate_id="c", tier=Tier.CERTIFY, certified=True, timing=timing(105.0))
    assert certification.judge(screened, near).certified is True  # within 3% of the screened p90 (102)
    slow = replace(near, timing=timing(105.1 * 1.0))
    judged = certification.judge(screened, slow)
    assert judged.verdict == Verdict.UNCERTIFIED and judged.failed_check == "timing" and judged.certified is False
    assert "90th percentile" in judged.message
    wrong = certification.failure(near, "fresh inputs at rows=1", "bad", Verdict.WRONG)
    assert certification.judge(screened, wrong) == wrong  # a failure stays what it was


def test_a_certification_past_the_screened_percentile_is_excused_only_by_its_own_control() -> None:
    screened = Evaluation("s", "softmax", Verdict.OK, timing=Timing(100.0, 98.0, 102.0, 97.0, (100.0,), 0, 0, 0))
    certified = replace(screened, candidate_id="c", tier=Tier.CERTIFY, certified=True)
    # an honest best whose screened percentile was a lucky low (the least of many medians) or whose
    # GPU has drifted since: 7% past the screened p90, as slow on the screening's inputs right after
    drifted = replace(certified, timing=timing(109.0), control_us=108.0)
    assert certification.judge(screened, drifted).certified is True
    assert certification.judge(screened, replace(drifted, control_us=None)).certified is False  # unpaired: fails
    # faster on the inputs it could predict: past the screened p90 and 10% past its control
    keyed = replace(certified, timing=timing(110.0), control_us=100.0)
    judged = certification.judge(screened, keyed)
    assert judged.verdict == Verdict.UNCERTIFIED and judged.failed_check == "timing" and judged.certified is False
    assert "its median 100 us on fsr's screening inputs, timed right after in the same load" in judged.message
    assert certification.judge(screened, replace(keyed, control_us=110.0 / certification.SLOWER)).certified is True
    # the control never convicts alone: within the screened p90's bound, a slower fresh set passes
    assert certification.judge(screened, replace(keyed, timing=timing(105.0))).certified is True
    # slower than screened by more than DRIFT, on every set: it was faster when screened
    stale = replace(certified, timing=timing(112.3), control_us=112.3)  # 10.1% past the p90 (102)
    judged = certification.judge(screened, stale)
    assert judged.failed_check == "timing" and "past the screened 90th percentile 102 us" in judged.message
    assert certification.judge(screened, replace(stale, timing=timing(112.1), control_us=112.1)).certified is True


def test_the_control_samples_reach_the_certification_as_their_median(compiler) -> None:
    _, got, _ = screened_and_certified(compiler, Certified(Verdict.OK, samples_us=SAMPLES,
                                                           control_us=(990.0, 1010.0, 1000.0)))
    assert got.control_us == pytest.approx(1000.0) and got.certified is True
    _, unpaired, _ = screened_and_certified(compiler, Certified(Verdict.OK, samples_us=SAMPLES))
    assert unpaired.control_us is None


def test_the_request_runs_the_screening_tuned_defines_and_names_the_screened_candidate() -> None:
    screened = Evaluation(CANDIDATE.id, "softmax", Verdict.OK, tuned_defines=(("BLOCK", 512),))
    request = certification.request(CANDIDATE, screened)
    assert request.certify == CANDIDATE.id and dict(request.resolved_defines())["BLOCK"] == 512
    assert request.source == CANDIDATE.source and request.id != CANDIDATE.id
    assert certification.request(CANDIDATE, replace(screened, tuned_defines=())).defines == CANDIDATE.defines


def test_where_a_campaign_certifies_only_certified_results_have_a_latency_in_the_tables() -> None:
    rows = frame([row(candidate_id="a", median_us=10.0), row(candidate_id="b", median_us=5.0),
                  row(candidate_id="c", verdict="WRONG", median_us=None),
                  row(candidate_id="ca", tier="certify", certified=True, certifies="a", median_us=10.2),
                  row(candidate_id="cb", tier="certify", certified=False, certifies="b", verdict="UNCERTIFIED",
                      median_us=None, failed_check="fresh inputs at rows=7")])
    counted = certification.counted(rows, certifies=True)
    assert list(counted["candidate_id"]) == ["a", "b", "c"]  # certifications are not evaluations
    assert counted.set_index("candidate_id")["median_us"].to_dict() == pytest.approx(
        {"a": 10.0, "b": float("nan"), "c": float("nan")}, nan_ok=True)
    assert list(counted["verdict"]) == ["OK", "OK", "WRONG"]
    uncounted = certification.counted(rows, certifies=False)
    assert uncounted.set_index("candidate_id")["median_us"]["b"] == 5.0
    assert certification.certifying({"config": {"eval": {"certify": True}}})
    assert not certification.certifying({"config": {}})  # a run from before certification


def test_an_old_lineage_without_the_tier_column_counts_every_row() -> None:
    old = pd.DataFrame([{"candidate_id": "a", "verdict": "OK", "median_us": 3.0}])
    assert certification.counted(old, certifies=True)["median_us"].tolist() == [3.0]


def test_a_certification_waits_for_its_fresh_benchmark_set_between_other_work(compiler) -> None:
    # the child builds it on a host thread: asked again (the GPU lock let go between questions)
    # rather than certified while the reference is computed
    answers = iter([False, False, True])

    class Building(StubSandbox):
        def call(self, kind, payload, timeout_s):
            if kind == "fresh":
                self.calls[kind] += 1
                return next(answers)
            return super().call(kind, payload, timeout_s)

    sandbox = Building(lambda kind, payload: Certified(Verdict.OK, samples_us=SAMPLES) if kind == "certify"
                       else ChildResult(Verdict.OK, samples_us=SAMPLES))
    evaluator = stub_evaluator(SOFTMAX, compiler, sandbox)
    try:
        screened = evaluator.evaluate(CANDIDATE)
        got = evaluator.evaluate(certification.request(CANDIDATE, screened))
        assert sandbox.calls["fresh"] == 3 and sandbox.calls["certify"] == 1 and got.certified is True
    finally:
        evaluator.close()


@settings(max_examples=300, deadline=None)
@given(median=st.floats(1.0, 1e5), spread=st.floats(0.0, 0.2), fresh=st.floats(0.5, 2.0),
       control=st.one_of(st.none(), st.floats(0.5, 2.0)))
def test_a_control_only_ever_excuses(median: float, spread: float, fresh: float, control: float | None) -> None:
    """A paired certification fails on timing only where the unpaired bound would fail it too."""
    screened = Evaluation("s", "softmax", Verdict.OK,
                          timing=Timing(median, median, median * (1 + spread), median, (median,), 0, 0, 0))
    unpaired = Evaluation("c", "softmax", Verdict.OK, timing=timing(median * fresh), tier=Tier.CERTIFY)
    paired = replace(unpaired, control_us=None if control is None else median * control)
    if certification.slower(screened, paired):
        assert certification.slower(screened, unpaired)
