"""Certification in the search, without a GPU, in the "leads" mode: a screened result that would lead is certified
before anything else is submitted; only certified results become a task's best (and reach a
model as the fastest, and stop a task at its target speedup); a kernel whose certification fails
never leads and its failure, naming the set, reaches the proposer's next request; certifications
are not evaluations; a resumed campaign keeps what was certified."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fsr.config import SearchConfig
from fsr.lineage import LineageWriter, read
from fsr.propose.mutate import MutateProposer
from fsr.search.fsr_strategy import run_fsr
from fsr.search.loop import CERTIFYING_PER_WORKER, run_campaign
from fsr.search.state import CampaignState
from fsr.testing.fakes import FakeEvaluator, FakeExecutor, ListWriter, softmax_task
from fsr.types import Candidate, Evaluation, Tier, Verdict
from tests.support.proposers import Recording

TASK = softmax_task()
FAILED_SET = "fresh inputs at rows=7,cols=33"


class Logged(FakeExecutor):
    """The fake executor, logging submissions and results in their order."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple[str, Candidate | Evaluation]] = []

    def submit(self, candidate: Candidate) -> None:
        self.log.append(("submit", candidate))
        super().submit(candidate)

    def poll(self, timeout_s: float) -> list[Evaluation]:
        out = super().poll(timeout_s)
        self.log += [("result", ev) for ev in out]
        return out


def cheating(**kw) -> FakeEvaluator:
    """VEC4 makes a kernel twice as fast in screening and fails its certification (a kernel that
    keyed on fsr's fixed inputs)."""
    return FakeEvaluator(effects={"VEC4": 2.0, "WARP_SHUFFLE": 1.3}, fail_certify={"VEC4": FAILED_SET}, **kw)


def campaign(evaluator: FakeEvaluator, config: SearchConfig | None = None, **kw):
    executor = Logged(evaluator, slots=8)
    proposer, writer = Recording(), ListWriter()
    summary = run_campaign([TASK], executor, proposer, config or SearchConfig(max_evaluations=80, seed=1), writer,
                           certify="leads", **kw)
    return summary, executor, proposer, writer


def test_a_kernel_whose_certification_fails_never_leads_and_the_proposer_hears_why() -> None:
    summary, executor, proposer, writer = campaign(cheating())
    screened = {c.id: e for c, e, _ in writer.rows if e.tier == Tier.SCREEN}
    certifications = [(c, e) for c, e, _ in writer.rows if e.tier == Tier.CERTIFY]
    failed = [(c, e) for c, e in certifications if not e.certified]
    assert failed and all(e.verdict == Verdict.UNCERTIFIED and e.failed_check == FAILED_SET for _, e in failed)
    assert all("VEC4" in detect_of(c) for c, _ in failed)
    # the fastest screened result was a VEC4 kernel, and it is not the best: a certified one is
    fastest = min((e for e in screened.values() if e.verdict == Verdict.OK), key=lambda e: e.timing.median_us)
    assert fastest.candidate_id in {c.certify for c, _ in failed}
    (task,) = summary.tasks
    passed = {c.certify for c, e in certifications if e.certified}
    assert task.best_id in passed and task.best_us > fastest.timing.median_us
    # the failure reached a later request, as a correctness failure naming the set
    told = [f for r in proposer.requests for f in r.failures if f.evaluation.verdict == Verdict.UNCERTIFIED]
    assert told and all(FAILED_SET in f.evaluation.message for f in told)
    assert {f.id for f in told} <= {c.certify for c, _ in failed}
    # no request showed an uncertified kernel as the best
    assert all(r.best is None or r.best.id in passed for r in proposer.requests)
    assert all(p.id not in {c.certify for c, _ in failed} for r in proposer.requests for p in r.parents)


def detect_of(cand: Candidate) -> frozenset[str]:
    from fsr.propose.features import detect

    return detect(cand)


def test_certifications_are_not_evaluations_of_the_budget_or_the_rate() -> None:
    summary, executor, _, writer = campaign(cheating(), SearchConfig(max_evaluations=40, seed=2))
    screenings = [e for _, e, _ in writer.rows if e.tier == Tier.SCREEN]
    certifications = [e for _, e, _ in writer.rows if e.tier == Tier.CERTIFY]
    assert len(screenings) == 40 == summary.evaluations and certifications
    assert summary.progress.certifications == len(certifications)
    assert summary.progress.uncertified == sum(not e.certified for e in certifications)
    assert len(executor.submitted) == 40 + len(certifications)


def test_a_result_due_for_certification_is_submitted_before_anything_else() -> None:
    # (due when its screening came back, or when a faster one awaited failed: at a result either way)
    _, executor, _, _ = campaign(cheating())
    events = executor.log
    certified = 0
    for k, (kind, what) in enumerate(events):
        if kind == "submit" and what.certify:  # type: ignore[union-attr]
            certified += 1
            last = max(i for i, (kd, _) in enumerate(events[:k]) if kd == "result")
            between = [c for kd, c in events[last + 1:k] if kd == "submit"]
            assert all(c.certify for c in between), "a candidate was submitted ahead of it"  # type: ignore[union-attr]
    assert certified


def test_a_kernel_certified_clearly_slower_than_screened_fails_on_timing() -> None:
    evaluator = FakeEvaluator(effects={"VEC4": 2.0}, certify_factor={"VEC4": 1.2})
    _, _, _, writer = campaign(evaluator, SearchConfig(max_evaluations=40, seed=1))
    failed = [e for _, e, _ in writer.rows if e.tier == Tier.CERTIFY and not e.certified]
    assert failed and {e.failed_check for e in failed} == {"timing"}


def test_the_target_speedup_counts_certified_results_only() -> None:
    config = SearchConfig(max_evaluations=80, seed=1, target_speedup=1.9)
    honest, _, _, _ = campaign(FakeEvaluator(effects={"VEC4": 2.0, "WARP_SHUFFLE": 1.3}), config)
    assert honest.stopped_by == "target speedup" and honest.evaluations < 80
    cheat, _, _, _ = campaign(cheating(), config)
    assert cheat.stopped_by == "evaluations" and cheat.evaluations == 80


def test_without_certification_the_fastest_screened_result_leads() -> None:
    writer = ListWriter()
    summary = run_campaign([TASK], FakeExecutor(cheating(), slots=8), MutateProposer(),
                           SearchConfig(max_evaluations=40, seed=1), writer)
    assert all(e.tier == Tier.SCREEN for _, e, _ in writer.rows)
    fastest = min((e for _, e, _ in writer.rows if e.verdict == Verdict.OK), key=lambda e: e.timing.median_us)
    assert summary.tasks[0].best_id == fastest.candidate_id


def test_a_resumed_campaign_keeps_its_certified_best_and_counts_no_certification(tmp_path: Path) -> None:
    config = SearchConfig(max_evaluations=30, seed=3)
    with LineageWriter(tmp_path) as writer:
        first = run_campaign([TASK], FakeExecutor(cheating(), slots=4), MutateProposer(), config, writer, certify="leads")
    rows = read(tmp_path).to_pylist()
    assert sum(r["tier"] == "screen" for r in rows) == 30 and any(r["tier"] == "certify" for r in rows)
    state = CampaignState([TASK], config, lambda t: MutateProposer().describe(t).features, certify="leads")
    assert state.load(read(tmp_path)) == len(rows)
    ts = state.tasks[TASK.name]
    assert ts.submitted == 30 and ts.best is not None and ts.best.id == first.tasks[0].best_id
    assert not state.due and not ts.awaiting
    with LineageWriter(tmp_path) as writer:
        more = run_campaign([TASK], FakeExecutor(cheating(), slots=4), MutateProposer(),
                            SearchConfig(max_evaluations=40, seed=3), writer, resume=tmp_path, certify="leads")
    assert more.evaluations == 10
    screened = [r["candidate_id"] for r in read(tmp_path).to_pylist() if r["tier"] == "screen"]
    assert len(screened) == 40 == len(set(screened))


def test_a_lineage_written_without_certification_is_certified_on_resume(tmp_path: Path) -> None:
    with LineageWriter(tmp_path) as writer:
        run_campaign([TASK], FakeExecutor(cheating(), slots=4), MutateProposer(), SearchConfig(max_evaluations=20, seed=4),
                     writer)
    with LineageWriter(tmp_path) as writer:
        resumed = run_campaign([TASK], FakeExecutor(cheating(), slots=4), MutateProposer(),
                               SearchConfig(max_evaluations=20, seed=4), writer, resume=tmp_path, certify="leads")
    assert resumed.evaluations == 0 and resumed.progress.certifications >= 1
    (task,) = resumed.tasks
    passed = {r["certifies"] for r in read(tmp_path).to_pylist() if r["tier"] == "certify" and r["certified"]}
    assert task.best_id in passed


def test_the_papers_loop_certifies_its_best_too() -> None:
    writer = ListWriter()
    proposer = Recording()
    summary = run_fsr(TASK, FakeExecutor(cheating(), slots=4), proposer, SearchConfig(max_evaluations=30, seed=1),
                      writer, depth=6, n_per_round=4, certify="leads")
    certifications = [(c, e) for c, e, _ in writer.rows if e.tier == Tier.CERTIFY]
    passed = {c.certify for c, e in certifications if e.certified}
    assert summary.best is not None and summary.best.id in passed
    assert summary.evaluations == sum(e.tier == Tier.SCREEN for _, e, _ in writer.rows)
    failed = {c.certify for c, e in certifications if not e.certified}
    if failed:  # a VEC4 kernel came up: it failed, and the next round heard of it
        told = {f.id for r in proposer.requests for f in r.failures if f.evaluation.verdict == Verdict.UNCERTIFIED}
        assert told & failed


class OneWorker(Logged):
    """Eight slots of one GPU worker, as a local campaign's worker holds them; a certification
    takes ten times a screening's seconds (it waits on its fresh sets' host builds)."""

    def __init__(self, evaluator: FakeEvaluator) -> None:
        super().__init__(evaluator, slots=8, eval_s=lambda c: 10.0 if c.certify else 1.0)
        self.most_certifying = 0

    def workers(self, wait_s: float = 0.0):
        one = super().workers(wait_s)
        return replace(one, devices=dict(list(one.devices.items())[:1]))

    def submit(self, candidate: Candidate) -> None:
        super().submit(candidate)
        self.most_certifying = max(self.most_certifying, sum(1 for *_, c in self._running if c.certify))


def test_certifications_in_flight_are_bounded_a_worker_and_its_other_slots_keep_screening() -> None:
    tasks = [replace(TASK, name=f"softmax_{i}") for i in range(6)]
    executor = OneWorker(FakeEvaluator(effects={"VEC4": 2.0, "WARP_SHUFFLE": 1.3}))
    writer = ListWriter()
    run_campaign(tasks, executor, Recording(), SearchConfig(max_evaluations=30, seed=1), writer, certify="leads")
    certifications = [e for _, e, _ in writer.rows if e.tier == Tier.CERTIFY]
    assert len(certifications) > CERTIFYING_PER_WORKER and all(e.certified for e in certifications)
    assert executor.most_certifying == CERTIFYING_PER_WORKER
