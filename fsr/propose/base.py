"""The Proposer protocol and the records that cross it.

A proposer turns a `ProposalRequest` (the task, the parents with their evaluations, the features
the policy wants, context for feedback) into new candidates. The search loop owns everything
else: which island asks, which parents, which features, deduplication, budgets. Two proposers
exist: `mutate` (offline, fast, runs inline in the loop) and a language-model proposer (slow:
the loop starts as many of its requests at once as the workers need, fsr.search.pace).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol

from fsr.types import Candidate, DeviceInfo, Evaluation, Task, Verdict

BASELINE = "the baseline"  # what a task's speedups are over...
EAGER = "PyTorch eager"  # ...or, for a task without a baseline kernel, this (KernelBench's convention)


def has_baseline(task: Task) -> bool:
    """Whether the task has a baseline kernel to start from and to time speedups against."""
    return bool(task.baseline_source.strip())


def speedup_basis(task: Task) -> str:
    """What the task's speedups are over: its baseline kernel, else PyTorch eager."""
    return BASELINE if has_baseline(task) else EAGER


def speedup_words(speedup: float | None, basis: str) -> str:
    """"1.52x the baseline", or "1.52x vs PyTorch eager" for a task without one, which a worker
    without PyTorch does not time: then "no baseline.cu, PyTorch eager not timed"."""
    if basis == BASELINE:
        return f"{speedup or 0.0:.2f}x {basis}"
    return f"{speedup:.2f}x vs {basis}" if speedup else f"no baseline.cu, {basis} not timed"


def task_speedup(task: Task, evaluation: Evaluation | None) -> float | None:
    """An OK, timed evaluation's speedup over `speedup_basis(task)`; None where that was not
    timed (a task without a baseline, on a worker without PyTorch)."""
    if evaluation is None:
        return None
    if has_baseline(task):
        return evaluation.speedup
    if evaluation.verdict != Verdict.OK or evaluation.timing is None or not evaluation.torch_us:
        return None
    return evaluation.torch_us / evaluation.timing.median_us


@dataclass(frozen=True)
class Scored:
    """A candidate with its evaluation (None while unevaluated) and the features detected in it.

    `features` holds names from `fsr.propose.features.CATALOGUE` (and any template switch names
    that are on); the search computes them once, when the candidate is proposed.
    """

    candidate: Candidate
    evaluation: Evaluation | None
    features: frozenset[str] = frozenset()
    id: str = field(init=False, repr=False, compare=False)  # the candidate's id, hashed once

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", self.candidate.id)

    @property
    def ok(self) -> bool:
        return self.evaluation is not None and self.evaluation.verdict == Verdict.OK \
            and self.evaluation.timing is not None

    @property
    def latency_us(self) -> float:
        """Median latency in microseconds; infinity unless OK and timed (failures rank last)."""
        if self.ok:
            assert self.evaluation is not None and self.evaluation.timing is not None
            return self.evaluation.timing.median_us
        return float("inf")


@dataclass(frozen=True)
class ProposalRequest:
    """Everything a proposer may use to write `n` new candidates.

    `parents` empty asks for a first kernel, written from the task's description (`first`): an
    island of a task without baseline.cu has nothing else until a correct kernel comes back.
    `features_wanted` are features the policy asks to add to the (first) parent, and
    `features_unwanted` features it asks to remove; proposers record them in
    `Origin.features_requested` ("NAME" to add, "-NAME" to remove). `best` is the fastest correct
    kernel of the task so far and `contrast` a slower correct one (performance feedback: what
    made the difference); `failures` are recent failed attempts from these parents or this
    island, each with its verdict and message (correctness feedback). `seed` makes a proposal
    reproducible; `temperature_scale` is the island's multiplier on a model's temperature.
    `asked` is how many requests the island made before this one (None where the caller keeps no
    count), so a proposer can open an island boldly; `feature_scores` are the policy's posterior
    mean log-speedups of the features it has observed (what their toggles did to parents).
    `device` is the GPU the candidates will be timed on (a model's prompt describes it; None:
    unknown, or the proposer's own default); proposers that write the same kernels for every
    GPU ignore it.
    """

    task: Task
    parents: tuple[Scored, ...]
    n: int = 1
    seed: int = 0
    island: int = 0
    generation: int = 1
    features_wanted: tuple[str, ...] = ()
    features_unwanted: tuple[str, ...] = ()
    best: Scored | None = None
    contrast: Scored | None = None
    failures: tuple[Scored, ...] = ()
    temperature_scale: float = 1.0
    asked: int | None = None
    feature_scores: tuple[tuple[str, float], ...] = ()
    device: DeviceInfo | None = None

    @property
    def first(self) -> bool:
        """A request for the task's first kernel: nothing to start from."""
        return not self.parents

    @property
    def features_requested(self) -> tuple[str, ...]:
        """The request as recorded in `Origin.features_requested`."""
        return self.features_wanted + tuple(f"-{f}" for f in self.features_unwanted)


@dataclass(frozen=True)
class Proposals:
    """What a proposer returns: valid candidates (each passed `fsr.candidate.parse`), how many
    it produced but dropped as invalid, why, and what a model charged for them."""

    candidates: tuple[Candidate, ...]
    dropped: int = 0
    errors: tuple[str, ...] = field(default=(), repr=False)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    throttles: tuple[float | None, ...] = ()  # HTTP 429s met on the way: the Retry-After each asked


@dataclass(frozen=True)
class ProposerTraits:
    """What a proposer can do for one task, as it stands when asked (`Proposer.describe`)."""

    # Whether it can write the task's first kernel from the description alone (a request with no
    # parents): a model can; the offline mutator needs a kernel to start from.
    writes_first_kernel: bool
    # The features it can act on: the feature policy chooses among these (a model: the whole
    # catalogue; the offline mutator: the template's switches and what its transforms add).
    features: tuple[str, ...]
    # What would let the search of the task go further when the proposer keeps answering with
    # nothing new (a clause for the user: "a feature template", "another model" ...).
    exhausted_hint: str


class Proposer(Protocol):
    """Writes candidates. Implementations must allow several requests in flight at once (the
    loop starts many for a slow proposer) and calls from any thread. Everything the search
    loops and `fsr run` ask of a proposer is here, so every proposer answers it."""

    def start(self, request: ProposalRequest) -> Future[Proposals]:
        """Up to `request.n` new candidates derived from `request.parents` (written from the
        task's description alone when there are none, by a proposer that `writes_first_kernel`;
        another answers such a request with no candidates and says why in `errors`), as a
        future: a model proposer returns while its request is in flight (the search keeps
        hundreds in flight, with no thread each); a proposer that answers in well under a
        millisecond answers before returning (`answered_now`). The request is read now: what it
        says is what the proposal uses.

        Every returned candidate has passed `fsr.candidate.parse`, names its parents and sets
        `origin` (proposer, model, move, features_requested); the loop sets `island` and
        `generation`. Invalid output is counted in `Proposals.dropped`, never raised; the future
        holds an exception only for the proposer's own faults (the loop counts those too and
        carries on).
        """
        ...

    def describe(self, task: Task) -> ProposerTraits:
        """What this proposer can do for `task` now (the hint may change as a budget is spent)."""
        ...

    @property
    def exhausted(self) -> bool:
        """True once no further proposal will be made (a model's token or money budget is
        spent); a search stops asking then. Always False for a proposer without a budget."""
        ...


def propose(proposer: Proposer, request: ProposalRequest) -> Proposals:
    """`proposer.start(request)`, waited for: for a caller that has nothing else to do."""
    return proposer.start(request).result()


def answered_now(propose: Callable[[ProposalRequest], Proposals], request: ProposalRequest) -> Future[Proposals]:
    """`propose(request)` as a done future (holding its exception if it raised): `start` for a
    proposer that answers at once."""
    future: Future[Proposals] = Future()
    try:
        future.set_result(propose(request))
    except Exception as e:
        future.set_exception(e)
    return future
