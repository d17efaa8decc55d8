"""The local executor and fsr's own faults: an evaluator that raises EvaluatorFault (its GPU child
failed in fsr's code twice) gives the candidate no verdict; the run stops with the reason (it has
no other worker to send the candidate to), while an evaluator's other exceptions stay CRASH."""

from __future__ import annotations

import pytest

from fsr.execute.local import EvaluatorUnavailable, LocalExecutor
from fsr.testing.fakes import softmax_variants
from fsr.types import Candidate, DeviceInfo, Evaluation, EvaluatorFault, Verdict
from tests.support.executors import drain


class Faulting:
    """OK for every candidate but the one named, on which fsr's own machinery fails."""

    def __init__(self, faulty: str, error: Exception):
        self.faulty, self.error, self.closed = faulty, error, 0

    def evaluate(self, cand: Candidate) -> Evaluation:
        if cand.id == self.faulty:
            raise self.error
        return Evaluation(cand.id, cand.task, Verdict.OK, device="rec")

    def device(self) -> DeviceInfo:
        return DeviceInfo(name="rec", arch="sm_90")

    def close(self) -> None:
        self.closed += 1



def test_fsrs_fault_stops_the_run_with_its_reason_and_records_no_verdict():
    first, faulty, never = softmax_variants(3)
    evaluator = Faulting(faulty.id, EvaluatorFault(f"candidate {faulty.id}: cudaErrorInvalidValue"))
    ex = LocalExecutor(lambda: evaluator, max_in_flight=3)
    for cand in (first, faulty, never):
        ex.submit(cand)
    got = drain(ex, 1)
    assert [e.candidate_id for e in got] == [first.id] and got[0].verdict == Verdict.OK
    with pytest.raises(EvaluatorUnavailable, match="fsr's own fault.*cudaErrorInvalidValue"):
        drain(ex, 1)
    with pytest.raises(EvaluatorUnavailable):
        ex.submit(never)
    assert ex.free_slots() == 0
    ex.close()
    assert evaluator.closed == 1


def test_any_other_exception_of_an_evaluator_is_still_a_crash_verdict():
    good, bad = softmax_variants(2)
    ex = LocalExecutor(lambda: Faulting(bad.id, ValueError("evaluator bug")), max_in_flight=2)
    ex.submit(bad)
    ex.submit(good)
    got = {e.candidate_id: e for e in drain(ex, 2)}
    ex.close()
    assert got[bad.id].verdict == Verdict.CRASH and got[good.id].verdict == Verdict.OK
