"""The search state of a campaign: per task its islands, feature policy, seeds and counts; the
global seen-set; and how results change them. Resume replays the lineage through the same
`tell` (and `certified`) that live results go through, so a resumed state is the state the
killed run had (less the evaluations it had not yet written).

Where the campaign certifies (docs/judge.md, "Two tiers"), `best` is the fastest certified result
(what counts) and `leader` the search's own fastest; certifications owed go to `due`, which the
loop drains. Two modes (`eval.certify`):

- "leads": a screened OK result faster than its task's best does not lead at once: it is due for
  certification, and joins its island, its policy credit and perhaps `best` (= `leader`) only once
  certified; a failed certification is told to its island as a failure. Results faster than the
  best behind a faster one awaiting are held until that one is decided, so a task certifies one
  improvement at a time, not every result of a good streak.
- "end": every screened result joins its island, policy credit and `leader` at once (the search
  runs on screened times). A task owes a certification of its fastest screened OK result not yet
  certified (and faster than `best`) once its budget is spent (`close`), and at once where that
  result reaches the target speedup; one at a time per task. A failure takes the result out of
  every island (told as a failure) and the next fastest is owed, until MAX_FAILED of the task's
  certifications have failed; what is left is said in the task's note.

A task without seeds (no baseline.cu and no template: an imported task) starts empty: an
island's requests have no parents, asking the proposer to write a first kernel, until a correct
kernel joins it (its own, or a migrant); failed first kernels come back in the next request.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import pyarrow as pa

from fsr import certification
from fsr.candidate import HeaderError, parse
from fsr.config import SearchConfig, certify_mode
from fsr.propose.base import ProposalRequest, Scored, has_baseline, speedup_basis, task_speedup
from fsr.propose.features import FeaturePolicy, detect
from fsr.search.island import Island, derive_seed, settings_for
from fsr.search.migrate import Migration, migrate
from fsr.types import Candidate, Evaluation, Origin, Task

# "end": a closed task stops certifying once this many of its certifications have failed (target
# speedup's included). A failure is a kernel that keyed on screening's inputs, or a flake; three
# says the top of the screened ranking is not to be trusted, and bounds what a task's end costs
# (at most three certifications, one when its fastest passes, as an honest one does).
MAX_FAILED = 3


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
    cut_short: int = 0  # screenings whose timing stopped early, already clearly slower than the best
    answered_from: int = 0  # screenings answered from an earlier judgement of the same program
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
    leader: Scored | None = None  # the search's own fastest: screened in "end", else `best`
    # "end": screened OK results by latency (a heap; an entry whose id is in `tried` is stale), and
    # the ids put to certification (passed, failed or awaiting): never owed again
    untried: list[tuple[float, str, Scored]] = field(default_factory=list)
    tried: set[str] = field(default_factory=set)
    closed: bool = False  # its budget is spent: its fastest is owed certification ("end")

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
                 features_for: Callable[[Task], tuple[str, ...]], certify: str | bool = "off") -> None:
        """`certify`: the mode of `eval.certify` ("off", "leads", "end"; module docstring): where
        not "off", only certified results count, and what is owed is put in `due` for the loop."""
        self.config = config
        self.mode = certify_mode(certify)
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
        contrast = slow if slow is not None and ts.leader is not None and slow.id != ts.leader.id else None
        return ProposalRequest(
            task=ts.task, parents=parents, n=n, seed=rng.getrandbits(63), island=index,
            generation=1 + max(p.candidate.generation for p in parents),
            features_wanted=choice.wanted, features_unwanted=choice.unwanted, best=ts.best,
            contrast=contrast, failures=island.recent_failures({p.id for p in parents}),
            temperature_scale=island.settings.temperature_scale, asked=asked,
            feature_scores=tuple((f, ts.policy.posterior(f)[0]) for f in ts.policy.features if ts.policy.count[f]))

    def tell(self, candidate: Candidate, evaluation: Evaluation, features: frozenset[str]) -> Scored:
        """Record a screening's result: verdict counts, migration, and (at once, or in "leads" once
        certified where it would lead) islands, policy credit and leader; in "end", what it owes."""
        member = Scored(candidate, evaluation, features)
        self.known[member.id] = member
        self.seen.add(member.id)
        ts = self.tasks[candidate.task]
        ts.finished += 1
        ts.verdicts[str(evaluation.verdict)] += 1
        ts.cut_short += evaluation.cut_short
        ts.answered_from += bool(evaluation.answered_from)
        if member.id in ts.seeds:
            ts.seeds[member.id] = member
        else:
            ts.islands[candidate.island % len(ts.islands)].evaluations += 1
        if self.mode == "leads" and member.ok and _leads(ts, member):
            self._contend(ts, member)
        else:
            self._place(ts, member)
        if self.mode == "end" and member.ok:
            heapq.heappush(ts.untried, (member.latency_us, member.id, member))
            self._owe(ts)
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
        if self.mode == "end":
            return self._certified_end(ts, request, evaluation)
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
        if member.ok and (ts.leader is None or member.latency_us < ts.leader.latency_us):
            ts.leader = member
        if self.mode != "end":  # the search's leader counts (certified before it leads, in "leads")
            ts.best = ts.leader

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

    # ---- "end": certify when the budget is spent ------------------------------------------------

    def close(self, task: str) -> None:
        """`task`'s budget is spent and nothing of it runs: in "end", its fastest screened results
        not yet certified are owed certification (module docstring)."""
        ts = self.tasks[task]
        if self.mode == "end" and not ts.closed:
            ts.closed = True
            self._owe(ts)

    def _owe(self, ts: TaskState) -> None:
        """Put in `due` the task's fastest untried screened result faster than its certified best,
        where one is owed: the task is closed (within MAX_FAILED failures), or it reaches the target
        speedup. One at a time: nothing while one awaits. A closed task owing nothing more is noted."""
        if ts.awaiting:
            return
        while ts.untried and (ts.untried[0][1] in ts.tried or not _leads(ts, ts.untried[0][2])):
            heapq.heappop(ts.untried)  # certified, failed, or no faster than the best: never owed again
        top = ts.untried[0][2] if ts.untried else None
        target = self.config.target_speedup
        reaches = top is not None and target > 0 and (task_speedup(ts.task, top.evaluation) or 0.0) >= target
        if top is not None and (reaches or (ts.closed and self._failed(ts) < MAX_FAILED)):
            heapq.heappop(ts.untried)
            ts.tried.add(top.id)
            ts.awaiting[top.id] = top
            self.due.append(top)
        elif ts.closed:
            self._note_uncertified(ts)

    def _certified_end(self, ts: TaskState, request: Candidate, evaluation: Evaluation) -> Scored | None:
        """A certification's outcome in "end": a pass may become `best`; a failure takes the result
        out of every island as a failure naming what failed (its features penalised). Then what is
        owed next. A certification of a result not awaited (a replayed lineage: the run closed the
        task at a moment the lineage does not record) is taken from the results known."""
        member = ts.awaiting.pop(request.certify, None) or self.known.get(request.certify)
        if member is None or member.candidate.task != ts.task.name or not member.ok:
            return None
        ts.tried.add(member.id)
        if evaluation.certified:
            ts.certified += 1
            if _leads(ts, member):
                ts.best = member
        else:
            ts.uncertified[evaluation.failed_check or str(evaluation.verdict)] += 1
            member = Scored(member.candidate, certification.feedback(member.candidate, evaluation), member.features)
            self._withdraw(ts, member)
        self._owe(ts)
        return member

    def _withdraw(self, ts: TaskState, failed: Scored) -> None:
        """A result that failed its certification leaves every island's population (migrants are
        the same member) and is told to its own as a failure; the leader is the fastest left."""
        assert failed.evaluation is not None
        self.known[failed.id] = failed
        if failed.id in ts.seeds:
            ts.seeds[failed.id] = failed
        for island in ts.islands:
            island.population = [m for m in island.population if m.id != failed.id]
        ts.islands[failed.candidate.island % len(ts.islands)].failures.append(failed)
        parent = self.known.get(failed.candidate.parents[0]) if failed.candidate.parents else None
        if parent is not None and parent.ok:
            ts.policy.learn(parent.features, failed.features, parent.latency_us, None, failed.evaluation.verdict)
        ts.leader = min((m for i in ts.islands for m in i.population), key=lambda m: m.latency_us, default=None)

    @staticmethod
    def _failed(ts: TaskState) -> int:
        return sum(ts.uncertified.values())

    def _note_uncertified(self, ts: TaskState) -> None:
        """A closed task that owes nothing more: say what was left uncertified, if anything."""
        faster = sum(1 for _, mid, m in ts.untried if mid not in ts.tried and _leads(ts, m))
        failed = self._failed(ts)
        if ts.best is None and (failed or faster):
            line = f"no certified kernel ({failed} certification{'s' * (failed != 1)} failed" + \
                (f", {faster} screened result{'s' * (faster != 1)} left uncertified)" if faster else ")")
        elif faster:
            line = (f"{faster} screened result{'s' * (faster != 1)} faster than the certified best left "
                    f"uncertified after {failed} failed certifications")
        else:
            return
        if line not in ts.note:
            ts.note = f"{ts.note}; {line}" if ts.note else f"{ts.task.name}: {line}"

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

