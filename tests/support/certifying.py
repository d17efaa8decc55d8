"""Certification in GPU tests that share their device with other pytest-xdist workers.

fsr fails a certification whose median on fresh inputs is more than 3% past its median on the
screening's own sets, timed right after in the same load (fsr.certification.SLOWER). Alone on a GPU
an honest kernel's two medians agree; beside five other workers' kernels one timing of a 70 us
softmax read 5% slow (on one H200, six workers), and other work can slow the one timing and not the
other. So where the GPU is shared, a certification that failed on timing alone is made again
(fresh inputs, fresh timing), up to SHARED_ROUNDS in all: other workers' kernels slow one timing,
not every one, while a kernel that is faster on the screening inputs than on fresh ones fails every
round. A failure of any other check is final, and alone (the whole_machine tests, one worker a GPU)
one round decides, as in fsr."""

from __future__ import annotations

from fsr import certification
from fsr.types import Candidate, Evaluation, Tier, Verdict
from tests.support.xdist_gpus import gpu_sharers

SHARED_ROUNDS = 3


def rounds(sharers: int | None = None) -> int:
    """Certifications a test may make of one request: SHARED_ROUNDS on a shared GPU, else 1."""
    return SHARED_ROUNDS if (gpu_sharers() if sharers is None else sharers) > 1 else 1


def certified(evaluator, request: Candidate, screened: Evaluation, sharers: int | None = None) -> Evaluation:
    """`request` (a certification request of `screened`) evaluated by `evaluator` and judged,
    again where it failed on timing alone and the GPU is shared (`rounds`). Each answer must be
    a certification, made afresh (not answered from an earlier judgement)."""
    got: Evaluation | None = None
    for _ in range(rounds(sharers)):
        answer = evaluator.evaluate(request)
        assert answer.candidate_id == request.id and answer.tier == Tier.CERTIFY and not answer.answered_from
        got = certification.judge(screened, answer)
        if got.verdict != Verdict.UNCERTIFIED or got.failed_check != certification.TIMING:
            break
    assert got is not None
    return got
