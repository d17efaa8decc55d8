"""The search state of a campaign: per task its islands, feature policy, seeds and counts; the
global seen-set; and how results change them. Resume replays the lineage through the same
`tell` that live results go through, so a resumed state is the state the killed run had (less
the evaluations it had not yet written).

A task without seeds (no baseline.cu and no template: an imported task) starts empty: an
island's requests have no parents, asking the proposer to write a first kernel, until a correct
kernel joins it (its own, or a migrant); failed first kernels come back in the next request.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import pyarrow as pa

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
                 features_for: Callable[[Task], tuple[str, ...]]) -> None:
        self.config = config
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
        """Record a result: islands, policy credit, best, verdict counts, migration."""
        member = Scored(candidate, evaluation, features)
        self.known[member.id] = member
        self.seen.add(member.id)
        ts = self.tasks[candidate.task]
        ts.finished += 1
        ts.verdicts[str(evaluation.verdict)] += 1
        if member.id in ts.seeds:  # seeds belong to every island: the same member, not copies
            ts.seeds[member.id] = member
            for island in ts.islands:
                island.tell(member)
        else:
            island = ts.islands[candidate.island % len(ts.islands)]
            island.tell(member)
            island.evaluations += 1
        parent = self.known.get(candidate.parents[0]) if candidate.parents else None
        if parent is not None and parent.ok:
            ts.policy.learn(parent.features, features, parent.latency_us,
                            member.latency_us if member.ok else None, evaluation.verdict)
        if member.ok and (ts.best is None or member.latency_us < ts.best.latency_us):
            ts.best = member
        ts.since_migration += 1
        if self.config.migrate_every > 0 and ts.since_migration >= self.config.migrate_every:
            ts.since_migration = 0
            ts.migrations += migrate(ts.islands, self.config.migrants)
        return member

    def load(self, table: pa.Table) -> int:
        """Replay lineage rows (fsr.lineage.read) of this campaign's tasks; returns how many."""
        from fsr.lineage import candidate_from_row, evaluation_from_row  # pyarrow-heavy; resume only

        rows = [r for r in table.to_pylist() if r["task"] in self.tasks]
        for row in rows:
            cand, ev = candidate_from_row(row), evaluation_from_row(row)
            ts = self.tasks[cand.task]
            ts.submitted += 1
            ts.device = ts.device or ev.device
            self.tell(cand, ev, frozenset(row["features_detected"]))
        for ts in self.tasks.values():  # new request seeds, not the killed run's again
            for island in ts.islands:
                island.settings = replace(island.settings, seed=derive_seed(island.settings.seed, len(rows)))
        self.prior_wall_s = _span_s(rows)
        return len(rows)


def _span_s(rows: list[dict]) -> float:
    """Seconds from the first start to the last finish recorded in the rows."""
    starts: list[datetime] = [r["started_at"] or r["finished_at"] for r in rows]
    ends: list[datetime] = [r["finished_at"] for r in rows]
    return (max(ends) - min(starts)).total_seconds() if rows else 0.0

