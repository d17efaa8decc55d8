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
"""

from __future__ import annotations

import functools
import math
import random
import re
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from fsr import expr
from fsr.candidate import HeaderError, check, parse, with_defines
from fsr.propose import launch_space, transforms
from fsr.propose.base import ProposalRequest, Proposals, Scored, answered_now, has_baseline
from fsr.propose.features import feature_name
from fsr.types import Candidate, DeviceInfo, Origin, Task


@dataclass(frozen=True)
class Made:
    """A move's result: new text (the parent's defines are carried over, but those named in
    `drop`) or a whole candidate; what the move did; how many of the request's parents it used
    (or the one kernel it was built on, when that is not the request's first parent)."""

    result: str | Candidate
    move: str
    parents: int = 1
    drop: tuple[str, ...] = ()
    parent: Scored | None = None  # built on this kernel, not on the request's first parent


Move = Callable[[ProposalRequest, random.Random], "Made | None"]
ATTEMPTS_PER_CANDIDATE = 12  # moves tried per candidate asked for (repeats are cheap to skip)
MEMORY_MAX = 200_000  # moves (and checks) remembered before the memory is cleared
BOLD_REQUESTS = 1  # an island's first requests that open with several template switches on
NO_KERNEL = "the offline proposer needs a kernel to start from (a baseline.cu), or a model to write one"


class MutateProposer:
    """The offline proposer (`proposer = "mutate"`)."""

    name = "mutate"
    writes_first_kernel = False  # every move starts from a kernel

    def __init__(self) -> None:
        self._templates: dict[str, Candidate | None] = {}
        # Moves already made (by result), so that a parent chosen again yields something new
        # instead of a duplicate the loop would drop; also spares re-checking a known result.
        self._made: set[tuple] = set()
        self._checked: set[tuple] = set()
        # Kernels proposed (by `_kernel_key`): a tunable's value set as a define and the same
        # value moved first in the header are one kernel, proposed once.
        self._kernels: set[tuple] = set()
        # Results of the rewrites that do not depend on the rng, by (parent, rewrite): an
        # exhausted neighbourhood is asked again and again before the task stops.
        self._rewritten: dict[tuple, object] = {}

    @property
    def exhausted(self) -> bool:
        """Never: the mutator has no budget (a task ends when its neighbourhood is mined)."""
        return False

    def set_device(self, device: DeviceInfo) -> None:
        """Ignored: the moves do not depend on the GPU."""

    def supported_features(self, task: Task) -> tuple[str, ...]:
        """The template's switches plus the features the source transforms add."""
        template = self._template(task)
        names = [feature_name(t.name) for t in template.features] if template else []
        return tuple(dict.fromkeys(names + list(transforms.BY_FEATURE)))

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
                if made is None or self._repeat(request, made):
                    continue
                cand = self._finish(request, made)
                if self._same_kernel(request, cand):
                    continue
                out.append(cand)
            except HeaderError as e:
                errors.append(str(e))
        return Proposals(tuple(out), dropped=len(errors), errors=tuple(errors))

    # ---- choosing and finishing a move ---------------------------------------------------------

    def exhausted_hint(self, task: Task) -> str:
        """What would give the search of `task` more to try once this proposer has nothing new."""
        if not has_baseline(task) and self._template(task) is None:
            return "a baseline.cu or a language model (--model)"
        more = []
        template = self._template(task)
        if template is None and not any(len(t.values) > 1 for t in parse(task.baseline_source, task).tunables):
            more.append("tunables that baseline.cu's code reads (e.g. ITEMS = [1, 2, 4] items per thread)")
        if template is None:
            more.append(f"a feature template ({task.directory}/template.cu, see tasks/README.md)")
        more.append("a language model (--model)")
        return ", ".join(more[:-1]) + (" or " if len(more) > 1 else "") + more[-1]

    def _made_key(self, request: ProposalRequest, made: Made) -> tuple:
        """Keys use Python's string hash, which a string caches, not the candidate's sha256 id:
        most moves keep the parent's source object, and repeats are common once a neighbourhood
        is mined."""
        if isinstance(made.result, Candidate):
            return _key(made.result)
        return (request.task.name, hash(made.result), len(made.result), request.parents[0].candidate.defines,
                made.drop)

    def _made_before(self, request: ProposalRequest, made: Made) -> bool:
        """Whether this result was made before or is a parent (nothing is remembered)."""
        key = self._made_key(request, made)
        return key in self._made or any(key == _key(p.candidate) for p in request.parents)

    def _repeat(self, request: ProposalRequest, made: Made) -> bool:
        """Whether this result was made before, or is a parent (remember it if not)."""
        if self._made_before(request, made):
            return True
        key = self._made_key(request, made)
        if len(self._made) > MEMORY_MAX:
            self._made.clear()
        self._made.add(key)
        return False

    def _same_kernel(self, request: ProposalRequest, cand: Candidate) -> bool:
        """Whether `cand` is a kernel proposed before or a parent (remember it if not)."""
        key = _kernel_key(cand)
        if key in self._kernels or any(key == _kernel_key(p.candidate) for p in request.parents):
            return True
        if len(self._kernels) > MEMORY_MAX:
            self._kernels.clear()
        self._kernels.add(key)
        return False

    def _one(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        if request.asked is not None and request.asked < BOLD_REQUESTS:
            made = self._bold(request, rng)
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
        template = self._template(request.task)
        wanted_transforms = [f for f in request.features_wanted if f in transforms.BY_FEATURE]
        if template is None:
            return {"transform": (self._transform, 2.0 if wanted_transforms else 0.5),
                    "tunable": (self._tunable, 1.0), "launch": (self._launch, 1.0)}
        switches = {feature_name(t.name) for t in template.features}
        asked = set(request.features_wanted) | set(request.features_unwanted)
        # A feature the template has a switch for is the toggle's to add, not a transform's.
        transform_only = [f for f in wanted_transforms if f not in switches]
        moves: dict[str, tuple[Move, float]]
        if self._instance(request.task, request.parents[0].candidate):
            # Stack onto a kernel with few switches on, prune one with many (a bold start).
            share = self._share_on(request)
            moves = {
                "stack": (self._stack, 0.5 + 3.0 * (1 - share)),
                "prune": (self._prune, 0.5 + 3.0 * share),
                "toggle": (self._toggle, 1.5 if asked & switches else 0.5),
                "transform": (self._transform, 1.0 if transform_only else 0.15),
                "tunable": (self._tunable, 0.5),
                "launch": (self._launch, 0.1),
            }
        else:  # the plain baseline (or a hand-written kernel): mostly back to the template
            moves = {
                "stack": (self._stack, 3.0),
                "toggle": (self._toggle, 2.0),
                "transform": (self._transform, 0.1),
                "tunable": (self._tunable, 0.1),
                "launch": (self._launch, 0.05),
            }
        if len(request.parents) > 1:
            moves["crossover"] = (self._crossover, 1.0)
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
            self._check(cand, request.task)
        if made.parent is not None:
            return replace(cand, parents=(made.parent.id,))
        return replace(cand, parents=tuple(p.id for p in request.parents[:made.parents]))

    def _check(self, cand: Candidate, task: Task) -> None:
        """`fsr.candidate.check`, memoised on what it reads: the source (kernel signatures), the
        header records, and the defines its expressions use (toggling a switch that no launch
        expression names cannot change the outcome). Raises HeaderError."""
        used: set[str] = set()
        for launch in cand.launches:
            for text in launch.grid + launch.block + (launch.smem,):
                used |= expr.names_in(text)
        key = (task.name, task.content_hash, hash(cand.source), len(cand.source), cand.launches, cand.scratch,
               cand.tunables, cand.features, tuple(d for d in cand.resolved_defines() if d[0] in used))
        if key not in self._checked:
            check(cand, task)  # raises before the key is remembered
            if len(self._checked) > MEMORY_MAX:
                self._checked.clear()
            self._checked.add(key)

    def _template(self, task: Task) -> Candidate | None:
        if task.name not in self._templates:
            try:
                self._templates[task.name] = parse(task.template_source, task) if task.template_source else None
            except HeaderError:
                self._templates[task.name] = None  # a broken template: transforms and tunables only
        return self._templates[task.name]

    # ---- moves ---------------------------------------------------------------------------------

    def _instance(self, task: Task, cand: Candidate) -> bool:
        """Whether `cand` is an instance of the task's template (has exactly its switches)."""
        template = self._template(task)
        return template is not None and {t.name for t in cand.features} == {t.name for t in template.features}

    def _share_on(self, request: ProposalRequest) -> float:
        """The share of switches on in the best template instance so far (else the parent)."""
        made = self._base(request.task, self._best_instance(request) or request.parents[0])
        if made is None or not made[1]:
            return 0.0
        base, current = made
        return sum(current[t.name] != _off(t.values) for t in base.features) / len(base.features)

    def _best_instance(self, request: ProposalRequest) -> Scored | None:
        """The task's fastest kernel so far if it is a template instance."""
        best = request.best
        if best is not None and best.ok and best.candidate.task == request.task.name \
                and self._instance(request.task, best.candidate):
            return best
        return None

    def _base(self, task: Task, parent: Scored) -> tuple[Candidate, dict[str, int]] | None:
        """The parent itself if it is a template instance, else the template set to the parent's
        detected features; with the current value of each switch by catalogue name."""
        template = self._template(task)
        if template is None:
            return None
        if self._instance(task, parent.candidate):
            base = parent.candidate
        else:
            base = with_defines(template, {t.name: _on(t.values) for t in template.features
                                           if feature_name(t.name) in parent.features})
        values = dict(base.resolved_defines())
        return base, {t.name: values[t.name] for t in base.features}

    def _toggle(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        made = self._base(request.task, request.parents[0])
        if made is None:
            return None
        base, current = made
        by_feature = {feature_name(t.name): t for t in base.features}
        changes = {by_feature[f].name: _on(by_feature[f].values, rng) for f in request.features_wanted if f in by_feature}
        changes |= {by_feature[f].name: _off(by_feature[f].values) for f in request.features_unwanted if f in by_feature}
        changes = {k: v for k, v in changes.items() if current[k] != v}
        if not changes:  # nothing asked applies here: explore one switch
            switch = rng.choice(base.features)
            changes = {switch.name: _off(switch.values) if current[switch.name] else _on(switch.values, rng)}
        move = "toggle " + " ".join(f"{'+' if v else '-'}{k}" for k, v in sorted(changes.items()))
        return Made(with_defines(base, changes), move)

    def _bold(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        """The template with several switches on: all of them on island 0 (once), else each on
        with even odds (at least two, or all there are), tunables at the template's defaults."""
        template = self._template(request.task)
        if template is None or not template.features:
            return None
        switches = template.features
        everything = Made(with_defines(template, {t.name: _on(t.values) for t in switches}), "bold all switches on")
        if request.island == 0 and not self._made_before(request, everything):
            return everything
        for _ in range(8):
            on = [t for t in switches if rng.random() < 0.5]
            least = min(2, len(switches))
            if len(on) < least:
                on += rng.sample([t for t in switches if t not in on], least - len(on))
            values = {t.name: _on(t.values, rng) if t in on else _off(t.values) for t in switches}
            made = Made(with_defines(template, values), "bold " + " ".join(f"+{t.name}" for t in on))
            if not self._made_before(request, made):
                return made
        return None

    def _stack(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        """The best template instance so far (even odds; else the parent) with one or two more
        switches on, chosen by the policy's scores and requests; requested removals go too."""
        return self._build(request, rng, adding=True)

    def _prune(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        """The best template instance so far (four times in five; else the parent) with one switch off,
        the worse the policy scores it (or if it asks to remove it) the likelier."""
        return self._build(request, rng, adding=False)

    def _build(self, request: ProposalRequest, rng: random.Random, adding: bool) -> Made | None:
        best = self._best_instance(request)
        start = best if best is not None and rng.random() < (0.5 if adding else 0.8) else request.parents[0]
        made = self._base(request.task, start)
        if made is None:
            return None
        base, current = made
        pool = [t for t in base.features if (current[t.name] == _off(t.values)) == adding]
        if not pool:
            return None
        scores = dict(request.feature_scores)
        wanted, unwanted = set(request.features_wanted), set(request.features_unwanted)
        sign, asked = (1, wanted) if adding else (-1, unwanted)

        def weight(name: str) -> float:
            f = feature_name(name)
            return math.exp(4 * sign * max(-1.0, min(1.0, scores.get(f, 0.0)))) * (3.0 if f in asked else 1.0)

        changes: dict[str, int] = {}
        for _ in range(1 if len(pool) == 1 or not adding or rng.random() < 0.5 else 2):
            pick = rng.choices(pool, weights=[weight(t.name) for t in pool])[0]
            pool.remove(pick)
            changes[pick.name] = _on(pick.values, rng) if adding else _off(pick.values)
        if adding:
            for t in base.features:
                if feature_name(t.name) in unwanted and current[t.name] != _off(t.values):
                    changes[t.name] = _off(t.values)
        move = ("stack " if adding else "prune ") + " ".join(f"{'+' if v else '-'}{k}"
                                                            for k, v in sorted(changes.items()))
        return Made(with_defines(base, changes), move, parent=None if start is request.parents[0] else start)

    def _crossover(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        a, b = request.parents[0], request.parents[1]
        if a.id == b.id:
            return None
        made_a, made_b = self._base(request.task, a), self._base(request.task, b)
        if made_a is None or made_b is None:
            return None
        base, values_a = made_a
        values_b = made_b[1]
        mixed = {k: (values_a[k] if rng.random() < 0.5 else values_b[k]) for k in values_a}
        if mixed == values_a or mixed == values_b:
            k = rng.choice([k for k in values_a if values_a[k] != values_b[k]] or list(values_a))
            mixed[k] = values_b[k] if mixed[k] == values_a[k] else values_a[k]
        return Made(with_defines(base, mixed), f"crossover {a.id} x {b.id}", parents=2)

    def _transform(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        wanted = [t for f in request.features_wanted for t in transforms.BY_FEATURE.get(f, ())]
        rest = [t for t in transforms.ALL if t not in wanted]
        rng.shuffle(wanted)
        rng.shuffle(rest)
        parent = request.parents[0].candidate
        for transform in wanted + rest:
            if transform in transforms.RANDOM:
                result = _transformed(parent, request.task, transform, rng)
            else:
                result = self._remember((_key(parent), request.task.content_hash, transform),
                                        functools.partial(_transformed, parent, request.task, transform, rng))
            if result is not None and not self._made_before(request, result):
                return result
        return None

    def _launch(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        """The first launch-space rewrite of the parent not made before."""
        parent = request.parents[0].candidate
        options = self._remember((_key(parent), request.task.content_hash, "launch"),
                                 lambda: list(launch_space.rewrites(parent, request.task)))
        for text, move in options:
            made = Made(text, move)
            if not self._made_before(request, made):
                return made
        return None

    def _remember(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """`compute()`, once per key (a rewrite of a parent that does not depend on the rng)."""
        if key not in self._rewritten:
            if len(self._rewritten) > MEMORY_MAX // 10:
                self._rewritten.clear()
            self._rewritten[key] = compute()
        return self._rewritten[key]

    def _tunable(self, request: ProposalRequest, rng: random.Random) -> Made | None:
        parent = request.parents[0].candidate
        options = [t for t in parent.tunables if len(t.values) > 1]
        if not options:
            return None
        t = rng.choice(options)
        current = dict(parent.resolved_defines())[t.name]
        value = rng.choice([v for v in t.values if v != current] or list(t.values))
        if rng.random() < 0.5:
            return Made(with_defines(parent, {t.name: value}), f"tunable {t.name}={value}")
        return Made(_reorder(parent, t.name, value), f"tunable {t.name} default {value}", drop=(t.name,))


def _transformed(parent: Candidate, task: Task, transform: transforms.Transform, rng: random.Random) -> Made | None:
    """A transform's result as a move: a body-only rewrite keeps the parent's header records."""
    made = transform(parent, task, rng)
    if made is None:
        return None
    text, move = made
    if transforms.split(text)[0] == transforms.split(parent.source)[0]:
        return Made(replace(parent, source=text), move)
    return Made(text, move)


def _key(cand: Candidate) -> tuple:
    """What identifies a candidate (as its id does), from cheap, cached hashes."""
    return (cand.task, hash(cand.source), len(cand.source), cand.resolved_defines(), cand.launches,
            cand.scratch, cand.compile_options)


def _kernel_key(cand: Candidate) -> tuple:
    """What makes two candidates the same kernel launched the same way: the code after the
    header, launches, scratch, features, the compiled values and each tunable's set of values,
    but not the order they are listed in (the default only starts the tuner)."""
    tunables = frozenset((t.name, frozenset(t.values)) for t in cand.tunables)
    return (cand.task, hash(transforms.split(cand.source)[1]), cand.launches, cand.scratch, cand.features,
            tunables, cand.resolved_defines(), cand.compile_options)


def _on(values: tuple[int, ...], rng: random.Random | None = None) -> int:
    """A non-zero value of a switch (random among several, e.g. VEC = [0, 2, 4])."""
    nonzero = [v for v in values if v] or [1]
    return rng.choice(nonzero) if rng else nonzero[0]


def _off(values: tuple[int, ...]) -> int:
    return 0 if 0 in values else values[0]


def _reorder(cand: Candidate, name: str, value: int) -> str:
    """The candidate's text with `value` moved first in its tunable's declared list."""
    t = next(t for t in cand.tunables if t.name == name)
    values = [value] + [v for v in t.values if v != value]
    line = re.compile(rf"^(\s*{re.escape(name)}\s*=\s*)\[[^\]]*\]", re.M)
    return line.sub(lambda m: m.group(1) + "[" + ", ".join(map(str, values)) + "]", cand.source, count=1)
