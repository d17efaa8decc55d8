"""The Proposer contract, for fsr's own proposers and a user's. A test module
(`from fsr.testing.proposer_contract import ProposerContract`) subclasses `ProposerContract` and
provides `make_proposer` (and, for a proposer whose bad output does not come from its parents,
`make_unusable`) and the name its candidates' origin carries; every test here then runs
against it, through the protocol alone:

    class TestMutateProposer(ProposerContract):
        origin_name = "mutate"

        def make_proposer(self):
            return MutateProposer()

Requests are for the softmax task with the test feature template, asking to improve its
baseline kernel.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import replace

from fsr.candidate import check, parse
from fsr.propose.base import ProposalRequest, Proposals, Proposer, ProposerTraits, Scored
from fsr.propose.features import detect
from fsr.testing.fakes import softmax_task
from fsr.types import DeviceInfo, Task


def request(n: int = 2, task: Task | None = None, parent_source: str | None = None) -> ProposalRequest:
    """A request to improve the task's baseline (or `parent_source`), asking for VEC4."""
    task = task or softmax_task()
    parent = parse(parent_source or task.baseline_source, task)
    return ProposalRequest(task=task, parents=(Scored(parent, None, detect(parent)),), n=n, seed=7,
                           features_wanted=("VEC4",))


def unmakeable_request(n: int = 2) -> ProposalRequest:
    """A request whose parent names a kernel its source lacks, in a task without a template: any
    kernel derived from it fails the candidate checks."""
    req = request(n, task=softmax_task(None))
    parent = req.parents[0].candidate
    bad = replace(parent, launches=tuple(replace(launch, kernel="no_such_kernel") for launch in parent.launches))
    return replace(req, parents=(Scored(bad, None, detect(bad)),))


def answer(proposer: Proposer, req: ProposalRequest) -> Proposals:
    return proposer.start(req).result(timeout=60)


class ProposerContract:
    """Behaviour every Proposer must have."""

    origin_name = ""  # what `Origin.proposer` says of this proposer's candidates

    def make_proposer(self) -> Proposer:
        raise NotImplementedError

    def make_unusable(self) -> tuple[Proposer, ProposalRequest]:
        """A proposer and a request from which no valid candidate can come. By default the
        parent is broken (what an offline proposer derives from it is broken too); a model
        proposer overrides this with replies that hold no usable kernel."""
        return self.make_proposer(), unmakeable_request()

    def test_proposals_are_checked_candidates_of_the_task_that_name_their_parent(self):
        proposer, req = self.make_proposer(), request(n=2)
        out = answer(proposer, req)
        assert isinstance(out, Proposals) and 1 <= len(out.candidates) <= 2, out
        for cand in out.candidates:
            check(cand, req.task)  # raises HeaderError for a candidate that did not pass `parse`
            assert cand.task == req.task.name and cand.id != req.parents[0].id
            assert req.parents[0].id in cand.parents
            assert cand.origin.proposer == self.origin_name
            assert cand.origin.features_requested == req.features_requested

    def test_start_returns_a_future_that_holds_the_answer(self):
        future = self.make_proposer().start(request(n=2))
        assert isinstance(future, Future)
        out = future.result(timeout=60)
        assert isinstance(out, Proposals) and 1 <= len(out.candidates) <= 2, out

    def test_no_more_candidates_than_asked_for(self):
        assert len(answer(self.make_proposer(), request(n=1)).candidates) <= 1

    def test_the_traits_name_distinct_features_and_a_one_line_hint(self):
        traits = self.make_proposer().describe(softmax_task())
        assert isinstance(traits, ProposerTraits) and isinstance(traits.writes_first_kernel, bool)
        features = traits.features
        assert features and len(set(features)) == len(features)
        assert all(isinstance(f, str) and f and f.strip() == f for f in features)
        assert isinstance(traits.exhausted_hint, str) and "\n" not in traits.exhausted_hint

    def test_a_request_naming_its_device_is_answered_and_nothing_is_spent_before(self):
        proposer = self.make_proposer()
        assert proposer.exhausted is False  # nothing spent yet
        device = DeviceInfo(name="NVIDIA H100 80GB HBM3", arch="sm_90", sm_count=132)
        assert answer(proposer, replace(request(n=1), device=device)).candidates

    def test_a_request_for_a_first_kernel_is_answered_as_the_proposer_says_it_can(self):
        """No parents: a proposer that `writes_first_kernel` writes kernels naming none; another
        answers with nothing and says why (a task without baseline.cu under the offline mutator)."""
        proposer = self.make_proposer()
        first = replace(request(n=2, task=softmax_task(None)), parents=(), features_wanted=())
        writes = proposer.describe(first.task).writes_first_kernel
        assert first.first
        out = answer(proposer, first)
        if not writes:
            assert out.candidates == () and out.errors, out
            return
        assert 1 <= len(out.candidates) <= 2, out
        for cand in out.candidates:
            check(cand, first.task)
            assert cand.parents == () and cand.origin.proposer == self.origin_name

    def test_unusable_output_is_dropped_never_raised(self):
        proposer, req = self.make_unusable()
        out = answer(proposer, req)
        assert out.candidates == () and out.dropped >= 1 and out.errors, out
