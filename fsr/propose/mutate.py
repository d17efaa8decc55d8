"""The offline proposer: feature-template moves, generic source transforms, tunable mutations.

No model and no network: it is the default when no endpoint is configured, and fast enough to
run inline in the search loop. Moves, chosen at random with weights that favour what the policy
asked for:

- bold (a task with a template, an island's first request): the template with several switches
  on at once, all of them on island 0, a random half elsewhere, so that combinations (which
  often pay off only together) are measured early and the islands start apart;
- stack: the best template instance so far (or the parent) with one or two further switches
  turned on, preferring those the policy scores well and those it asks for: what paid off is
  kept and built on;
- prune: the same kernel with one switch turned off, preferring those scored worst, so that a
  bold start loses the switch that holds it back (stack weighs more while the kernel has few
  switches on, prune while it has many);
- toggle: the task's template (or the parent itself, when it is a template instance, so earlier
  source transforms survive) with the requested feature switches turned on or off;
- crossover: each switch taken from one of two parents;
- transform: a rewrite from `fsr.propose.transforms` (restrict, unroll, launch bounds, fast
  math, __ldg), preferring those that add a requested feature; one the parent already had
  made is skipped, so each is tried;
- launch: the launch space widened (`fsr.propose.launch_space`: block sizes, work per thread),
  the main move for a task with no template, e.g. a user's baseline that declares one value;
- tunable: a different value as the default (the header reordered) or as a define.

For a task with a template, little goes to transforms, launch rewrites and tunables of a parent
that is no template instance (the plain baseline): such kernels rarely beat the template's
switches. A task without one searches its launch space, transforms and tunables as before.

Every result is re-parsed with `fsr.candidate.parse`; one that fails is dropped and counted.
This module chooses among the moves and finishes their results; the template moves are in
`fsr.propose.switch_moves`, the rewrites of a kernel's text in `fsr.propose.source_moves`, and
what was made before in `fsr.propose.move_memory`.
"""

from __future__ import annotations

import random
from concurrent.futures import Future
from dataclasses import replace

from fsr.candidate import HeaderError, check, parse, with_defines
from fsr.propose import transforms
from fsr.propose.base import ProposalRequest, Proposals, ProposerTraits, answered_now, has_baseline
from fsr.propose.features import feature_name
from fsr.propose.move_memory import Made, Move, MoveMemory
from fsr.propose.source_moves import SourceMoves
from fsr.propose.switch_moves import SwitchMoves
from fsr.types import Candidate, Origin, Task

ATTEMPTS_PER_CANDIDATE = 12  # moves tried per candidate asked for (repeats are cheap to skip)
BOLD_REQUESTS = 1  # an island's first requests that open with several template switches on
NO_KERNEL = "the offline proposer needs a kernel to start from (a baseline.cu), or a model to write one"


class MutateProposer:
    """The offline proposer (`proposer = "mutate"`)."""

    name = "mutate"

    def __init__(self) -> None:
        self.memory = MoveMemory()
        self.switches = SwitchMoves(self.memory)
        self.source = SourceMoves(self.memory)

    @property
    def exhausted(self) -> bool:
        """Never: the mutator has no budget (a task ends when its neighbourhood is mined)."""
        return False

    def describe(self, task: Task) -> ProposerTraits:
        """No first kernels; the template's switches plus the features the source transforms add."""
        template = self.switches.template(task)
        names = [feature_name(t.name) for t in template.features] if template else []
        features = tuple(dict.fromkeys(names + list(transforms.BY_FEATURE)))
        return ProposerTraits(writes_first_kernel=False, features=features, exhausted_hint=self._hint(task, template))

    def start(self, request: ProposalRequest) -> Future[Proposals]:
        """Answered before it returns (the mutator takes well under a millisecond)."""
        return answered_now(self.propose, request)

    def propose(self, request: ProposalRequest) -> Proposals:
        """Up to `request.n` valid candidates; each move tried is recorded in Origin.move. A
        request with no parents gets none (every move starts from a kernel)."""
        if request.first:
            return Proposals((), errors=(f"{request.task.name}: {NO_KERNEL}",))
        rng = random.Random(request.seed)
        out: list[Candidate] = []
        errors: list[str] = []
        for _ in range(request.n * ATTEMPTS_PER_CANDIDATE):
            if len(out) >= request.n:
                break
            try:
                made = self._one(request, rng)
                if made is None or self.memory.repeat(request, made):
                    continue
                cand = self._finish(request, made)
                if self.memory.same_kernel(request, cand):
                    continue
                out.append(cand)
            except HeaderError as e:
                errors.append(str(e))
        return Proposals(tuple(out), dropped=len(errors), errors=tuple(errors))

    def _hint(self, task: Task, template: Candidate | None) -> str:
        """What would give the search of `task` more to try once this proposer has nothing new."""
        if not has_baseline(task) and template is None:
            return "a baseline.cu or a language model (--model)"
        more = []
        if template is None and not any(len(t.values) > 1 for t in parse(task.baseline_source, task).tunables):
            more.append("tunables that baseline.cu's code reads (e.g. ITEMS = [1, 2, 4] items per thread)")
        if template is None:
            more.append(f"a feature template ({task.directory}/template.cu, see tasks/README.md)")
        more.append("a language model (--model)")
        return ", ".join(more[:-1]) + (" or " if len(more) > 1 else "") + more[-1]

    # ---- choosing and finishing a move ---------------------------------------------------------

    def _one(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        if request.asked is not None and request.asked < BOLD_REQUESTS:
            made = self.switches.bold(request, rng)
            if made is not None:
                return made
        moves = self._moves(request)
        names = list(moves)
        weights = [moves[n][1] for n in names]
        while names:
            i = rng.choices(range(len(names)), weights=weights)[0]
            made = moves[names[i]][0](request, rng)
            if made is not None:
                return made
            del names[i], weights[i]
        return None

    def _moves(self, request: ProposalRequest) -> dict[str, tuple[Move, float]]:
        """Applicable moves with weights: requested features first, exploration after."""
        sw, src = self.switches, self.source
        template = sw.template(request.task)
        wanted_transforms = [f for f in request.features_wanted if f in transforms.BY_FEATURE]
        if template is None:
            return {"transform": (src.transform, 2.0 if wanted_transforms else 0.5),
                    "tunable": (src.tunable, 1.0), "launch": (src.launch, 1.0)}
        switches = {feature_name(t.name) for t in template.features}
        asked = set(request.features_wanted) | set(request.features_unwanted)
        # A feature the template has a switch for is the toggle's to add, not a transform's.
        transform_only = [f for f in wanted_transforms if f not in switches]
        moves: dict[str, tuple[Move, float]]
        if sw.instance(request.task, request.parents[0].candidate):
            # Stack onto a kernel with few switches on, prune one with many (a bold start).
            share = sw.share_on(request)
            moves = {
                "stack": (sw.stack, 0.5 + 3.0 * (1 - share)),
                "prune": (sw.prune, 0.5 + 3.0 * share),
                "toggle": (sw.toggle, 1.5 if asked & switches else 0.5),
                "transform": (src.transform, 1.0 if transform_only else 0.15),
                "tunable": (src.tunable, 0.5),
                "launch": (src.launch, 0.1),
            }
        else:  # the plain baseline (or a hand-written kernel): mostly back to the template
            moves = {
                "stack": (sw.stack, 3.0),
                "toggle": (sw.toggle, 2.0),
                "transform": (src.transform, 0.1),
                "tunable": (src.tunable, 0.1),
                "launch": (src.launch, 0.05),
            }
        if len(request.parents) > 1:
            moves["crossover"] = (sw.crossover, 1.0)
        return moves

    def _finish(self, request: ProposalRequest, made: Made) -> Candidate:
        """Parse new text (carrying the parent's defines but `made.drop`), or re-check a candidate
        at its defines; stamp parents and origin. Raises HeaderError.

        A body-only rewrite comes as a candidate with the parent's header records and the new
        source: `check` is the part of `parse` that reads the body, so it is rerun in full, and
        tomllib is spared re-reading an unchanged header."""
        origin = Origin(proposer=self.name, features_requested=request.features_requested, move=made.move)
        if isinstance(made.result, str):
            cand = parse(made.result, request.task, origin)
            names = {t.name for t in cand.tunables + cand.features} - set(made.drop)
            carried = {k: v for k, v in request.parents[0].candidate.defines if k in names}
            if carried:
                cand = with_defines(cand, carried)
                check(cand, request.task)
        else:
            cand = replace(made.result, origin=origin)
            self.memory.check(cand, request.task)
        if made.parent is not None:
            return replace(cand, parents=(made.parent.id,))
        return replace(cand, parents=tuple(p.id for p in request.parents[:made.parents]))
