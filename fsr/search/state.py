"""The search state of a campaign: per task its islands, feature policy, seeds and counts; the
global seen-set; and how results change them. Resume replays the lineage through the same
`tell` (and `certified`) that live results go through, so a resumed state is the state the
killed run had (less the evaluations it had not yet written).

Where the campaign certifies (docs/judge.md, "Two tiers"), a screened OK result faster than its
task's best does not lead at once: it is due for certification (`due`, which the loop drains), and
joins its island, its policy credit and perhaps `best` only once certified; a failed certification
is told to its island as a failure. Results faster than the best behind a faster one awaiting are
held until that one is decided, so a task certifies one improvement at a time, not every result
of a good streak.

A task without seeds (no baseline.cu and no template: an imported task) starts empty: an
island's requests have no parents, asking the proposer to write a first kernel, until a correct
kernel joins it (its own, or a migrant); failed first kernels come back in the next request.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import pyarrow as pa

from fsr import certification
from fsr.candidate import HeaderError, parse
from fsr.config import SearchConfig
from fsr.propose.base import ProposalRequest, Scored, has_baseline, speedup_basis, task_speedup
from fsr.propose.features import FeaturePolicy, detect
from fsr.search.island import Island, derive_seed, settings_for
from fsr.search.migrate import Migration, migrate
from fsr.types import Candidate, Evaluation, Origin, Task


def seed_candidates(task: Task) -> list[Candidate]:
    """Every island's starting point: the baseline and the template at its default features
    (neither, for a task without them: its first kernels are written by a model)."""
    out = [parse(task.baseline_source, task, Origin(proposer="seed", move="baseline"))] if has_baseline(task) else []
    if task.template_source:
        try:
            out.append(parse(task.template_source, task, Origin(proposer="seed", move="template")))
        except HeaderError:
            pass  # a broken template is the task author's bug; the baseline still seeds
    return out


@dataclass
class TaskState:
    """One task's search: islands, policy, seeds (by id; evaluated or not) and counts."""

    task: Task
    islands: list[Island]
    policy: FeaturePolicy
    seeds: dict[str, Scored]
    submitted: int = 0  # evaluations committed to: submitted now, or found in the lineage
    finished: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    best: Scored | None = None
    since_migration: int = 0
    migrations: list[Migration] = field(default_factory=list)
    note: str = ""  # why the task stopped before its budgets, when it did (one line)
    device: str = ""  # the GPU model of its first lineage row that names one (resume pins it there)
    # Certification (where the campaign certifies): screened results that would lead, queued for
    # certification, and those faster than the best behind a faster one queued; neither has joined
    # an island yet. `best` is then the fastest certified result.
    awaiting: dict[str, Scored] = field(default_factory=dict)
    held: list[Scored] = field(default_factory=list)
    certified: int = 0
    uncertified: Counter[str] = field(default_factory=Counter)  # failed certifications by the check that failed

    @property
    def best_speedup(self) -> float | None:
        """The best kernel's speedup over `speedup_basis` (the baseline, else PyTorch eager)."""
        return task_speedup(self.task, self.best.evaluation) if self.best else None

    @property
    def speedup_basis(self) -> str:
        return speedup_basis(self.task)


class CampaignState:
    """Islands and policies of every task, the seen-set, and every evaluated member by id."""

    def __init__(self, tasks: Sequence[Task], config: SearchConfig,
                 features_for: Callable[[Task], tuple[str, ...]], certify: bool = False) -> None:
        """`certify`: only certified results lead (module docstring); a result that would lead is
        then put in `due` for the loop to certify."""
        self.config = config
        self.certify = certify
        self.due: deque[Scored] = deque()  # screened results whose certification the loop owes
        self.tasks: dict[str, TaskState] = {}
        self.seen: set[str] = set()  # ids submitted or evaluated: never submitted again
        self.known: dict[str, Scored] = {}  # evaluated members by id (parents, policy credit)
        self.prior_wall_s = 0.0  # wall time the lineage already spent (resume)
        for task in tasks:
            islands = [Island(i, settings_for(config, task.name, i), config) for i in range(max(1, config.islands))]
            seeds = {c.id: Scored(c, None, detect(c)) for c in seed_candidates(task)}
            self.tasks[task.name] = TaskState(task, islands, FeaturePolicy(features_for(task)), seeds)

    def request(self, task: str, index: int, n: int) -> ProposalRequest:
        """Ask island `index` of `task` for parents, the policy for features, and build a request."""
        ts = self.tasks[task]
        island = ts.islands[index]
        rng = island.rng()
        asked = island.requests
        island.requests += 1
        parents = island.ask(rng) or ((rng.choice(list(ts.seeds.values())),) if ts.seeds else ())
        if not parents:  # a first kernel, written from the description; the islands start apart
            return ProposalRequest(task=ts.task, parents=(), n=n, seed=rng.getrandbits(63), island=index,
                                   failures=island.recent_failures(set()),
                                   temperature_scale=island.settings.temperature_scale, asked=asked)
        choice = ts.policy.choose(parents[0].features, rng, island.settings.explore)
        slow = max(island.population, key=lambda m: m.latency_us, default=None)
        contrast = slow if slow is not None and ts.best is not None and slow.id != ts.best.id else None
        return ProposalRequest(
            task=ts.task, parents=parents, n=n, seed=rng.getrandbits(63), island=index,
            generation=1 + max(p.candidate.generation for p in parents),
            features_wanted=choice.wanted, features_unwanted=choice.unwanted, best=ts.best,
            contrast=contrast, failures=island.recent_failures({p.id for p in parents}),
            temperature_scale=island.settings.temperature_scale, asked=asked,
            feature_scores=tuple((f, ts.policy.posterior(f)[0]) for f in ts.policy.features if ts.policy.count[f]))

    def tell(self, candidate: Candidate, evaluation: Evaluation, features: frozenset[str]) -> Scored:
        """Record a screening's result: verdict counts, migration, and (at once, or once certified
        where it would lead) islands, policy credit and best."""
        member = Scored(candidate, evaluation, features)
        self.known[member.id] = member
        self.seen.add(member.id)
        ts = self.tasks[candidate.task]
        ts.finished += 1
        ts.verdicts[str(evaluation.verdict)] += 1
        if member.id in ts.seeds:
            ts.seeds[member.id] = member
        else:
            ts.islands[candidate.island % len(ts.islands)].evaluations += 1
        if self.certify and member.ok and _leads(ts, member):
            self._contend(ts, member)
        else:
            self._place(ts, member)
        ts.since_migration += 1
        if self.config.migrate_every > 0 and ts.since_migration >= self.config.migrate_every:
            ts.since_migration = 0
            ts.migrations += migrate(ts.islands, self.config.migrants)
        return member

    def certified(self, request: Candidate, evaluation: Evaluation) -> Scored | None:
        """Record a certification's outcome (`request` names the screened candidate; `evaluation`
        judged against the timing bound already): the screened result joins its island and may
        lead, or is told to its island as a failure naming what failed. The result, or None for
        a certification of nothing awaited (a lineage without its screening row)."""
        ts = self.tasks[request.task]
        member = ts.awaiting.pop(request.certify, None)
        if member is None:
            return None
        if evaluation.certified:
            ts.certified += 1
            self._place(ts, member)
        else:
            ts.uncertified[evaluation.failed_check or str(evaluation.verdict)] += 1
            member = Scored(member.candidate, certification.feedback(member.candidate, evaluation), member.features)
            self.known[member.id] = member
            self._place(ts, member)
        self._release(ts)
        return member

    def _place(self, ts: TaskState, member: Scored) -> None:
        """A decided result: into its island (every island, for a seed), policy credit, best."""
        if member.id in ts.seeds:  # seeds belong to every island: the same member, not copies
            ts.seeds[member.id] = member
            for island in ts.islands:
                island.tell(member)
        else:
            ts.islands[member.candidate.island % len(ts.islands)].tell(member)
        candidate, evaluation = member.candidate, member.evaluation
        assert evaluation is not None
        parent = self.known.get(candidate.parents[0]) if candidate.parents else None
        if parent is not None and parent.ok:
            ts.policy.learn(parent.features, member.features, parent.latency_us,
                            member.latency_us if member.ok else None, evaluation.verdict)
        if member.ok and (ts.best is None or member.latency_us < ts.best.latency_us):
            ts.best = member

    def _contend(self, ts: TaskState, member: Scored) -> None:
        """A screened result faster than the best: due for certification if faster than every
        one awaiting it, else held until they are decided."""
        if all(member.latency_us < other.latency_us for other in ts.awaiting.values()):
            ts.awaiting[member.id] = member
            self.due.append(member)
        else:
            ts.held.append(member)

    def _release(self, ts: TaskState) -> None:
        """After a certification: held results no longer faster than the best are placed; the
        fastest still faster than the best and than every one awaiting is due."""
        ts.held.sort(key=lambda m: m.latency_us)
        while ts.held:
            if not _leads(ts, ts.held[0]):
                self._place(ts, ts.held.pop(0))
            elif all(ts.held[0].latency_us < other.latency_us for other in ts.awaiting.values()):
                self._contend(ts, ts.held.pop(0))
            else:
                break

    def load(self, table: pa.Table) -> int:
        """Replay lineage rows (fsr.lineage.read) of this campaign's tasks; returns how many."""
        from fsr.lineage import candidate_from_row, evaluation_from_row  # pyarrow-heavy; resume only

        rows = [r for r in table.to_pylist() if r["task"] in self.tasks]
        for row in rows:
            cand, ev = candidate_from_row(row), evaluation_from_row(row)
            ts = self.tasks[cand.task]
            ts.device = ts.device or ev.device
            if cand.certify:  # a certification: not an evaluation of the budget
                self.certified(cand, ev)
                continue
            ts.submitted += 1
            self.tell(cand, ev, frozenset(row["features_detected"]))
        # what the killed run left uncertified is certified first (a lineage written without
        # certification: its results that would lead, now)
        self.due = deque(m for ts in self.tasks.values() for m in ts.awaiting.values())
        for ts in self.tasks.values():  # new request seeds, not the killed run's again
            for island in ts.islands:
                island.settings = replace(island.settings, seed=derive_seed(island.settings.seed, len(rows)))
        self.prior_wall_s = _span_s(rows)
        return len(rows)


def _leads(ts: TaskState, member: Scored) -> bool:
    """Whether `member` is faster than the task's best (there is none yet)."""
    return ts.best is None or member.latency_us < ts.best.latency_us


def _span_s(rows: list[dict]) -> float:
    """Seconds from the first start to the last finish recorded in the rows."""
    starts: list[datetime] = [r["started_at"] or r["finished_at"] for r in rows]
    ends: list[datetime] = [r["finished_at"] for r in rows]
    return (max(ends) - min(starts)).total_seconds() if rows else 0.0

