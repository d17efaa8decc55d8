"""The asynchronous search loop: ask -> propose -> submit -> poll -> tell, with no generation
barrier. While the executor has free slots, the least-served task and island is asked for
parents, the proposer writes candidates, duplicates are dropped by id (before any GPU time),
and the rest are submitted; every finished evaluation is told to its island at once and
written to the lineage. Budgets (per task): evaluations, wall time, target speedup. A task whose
proposer keeps answering with nothing new is exhausted: once MAX_EMPTY_REQUESTS requests in a
row brought nothing and none of its candidates is waiting or running, it stops, and the view is
given one line naming it and what would let it go further (the proposer's `exhausted_hint`).
A campaign that ends by itself then asks for the comparators that no evaluation carried, within a
bound (fsr.search.comparators); a user's stop (Ctrl-C) skips that.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from fsr import certification
from fsr.config import SearchConfig
from fsr.execute.base import DEVICE_WAIT_S, Executor, Workers
from fsr.propose.base import Proposer, speedup_words
from fsr.propose.features import detect
from fsr.search import comparators
from fsr.search.pace import Ceilings
from fsr.search.pool import ProposalPool
from fsr.search.progress import CampaignSummary, Progress, snapshot
from fsr.search.sink import BackgroundSink, LineageSink
from fsr.search.state import CampaignState, TaskState
from fsr.types import Candidate, Evaluation, Task

POLL_S = 0.5  # longest wait in Executor.poll when only evaluations are outstanding
PROPOSAL_POLL_S = 0.01  # ... when model proposals are outstanding too (collect them promptly)
VIEW_EVERY_S = 0.25
# Certifications in flight at once, per GPU worker: the rest wait ahead of new candidates (a
# certification waits in its worker for its task's fresh sets, so unbounded they held every slot)
CERTIFYING_PER_WORKER = 2
MAX_EMPTY_REQUESTS = 64  # a task's answered requests in a row with nothing new: its space looks exhausted


class View(Protocol):
    """Shows progress (fsr.view): `update` after each batch of results (and every VIEW_EVERY_S),
    so it must be cheap; `close` once, at the end."""

    def update(self, progress: Progress) -> None: ...

    def close(self, progress: Progress) -> None: ...

    def note(self, text: str) -> None:
        """One line of news: a task stopped early and why, a worker lost."""
        ...


@dataclass(frozen=True)
class Pending:
    """A candidate between proposal and result, with what the lineage row needs about it."""

    candidate: Candidate
    features: frozenset[str]
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    started_at: datetime | None = None


def run_campaign(tasks: Sequence[Task], executor: Executor, proposer: Proposer, config: SearchConfig,
                 writer: LineageSink | None = None, view: View | None = None, *,
                 resume: str | Path | None = None, pace: Ceilings | None = None,
                 candidates_per_request: int = 1, certify: str | bool = "off") -> CampaignSummary:
    """Search every task until its budget is spent; the executor is shared, work is balanced.

    `resume` names a run directory whose lineage is replayed first (islands, policy, seen ids,
    budgets), and each resumed task is pinned to the GPU model its rows were measured on, so its
    timings stay comparable. `pace` paces a slow proposer's requests within those ceilings (a
    model: fsr.search.pace); None runs them inline (the offline mutator). Lineage rows are appended on a background thread
    (fsr.search.sink); the caller owns and closes executor and writer. `certify` (`eval.certify`):
    "off", "leads" or "end" (fsr.search.state; docs/judge.md, "Two tiers").
    """
    state = CampaignState(tasks, config, lambda task: proposer.describe(task).features, certify=certify)
    resumed, compared = 0, set()
    if resume is not None:
        from fsr.lineage import read

        table = read(resume)
        resumed = state.load(table)
        compared = comparators.carried_in(table.to_pylist()) | _recorded_comparators(resume)
        for ts in state.tasks.values():
            if ts.device:
                executor.pin(ts.task.name, ts.device)
    # A paced model's workers are up by now (its prompts name their GPU), so asking is cheap.
    workers = executor.workers(DEVICE_WAIT_S) if pace is not None else Workers()
    pool = ProposalPool(proposer, pace, gpus=len(workers.devices), device=workers.device)
    sink = BackgroundSink(writer) if writer is not None else None
    try:
        return Driver(state, executor, pool, sink, view, candidates_per_request, resumed, compared).run()
    finally:
        pool.close()
        if sink is not None:
            sink.close()  # every row told so far reaches the writer, also when the loop raised


def _recorded_comparators(run_dir: str | Path) -> set[str]:
    """The tasks whose comparators a run's earlier campaign recorded in its run.json."""
    from fsr import run_json
    from fsr.lineage import LineageError

    try:
        recorded = run_json.read_run_json(run_dir).get("comparators") or {}
    except LineageError:
        return set()
    return comparators.carried_in({"task": k, **v} for k, v in recorded.items() if isinstance(v, dict))


class Driver:
    """One campaign's loop; see the module docstring. Single-threaded: a model's requests run on
    the request loop's thread (fsr.propose.llm_gate), and their answers are collected here."""

    def __init__(self, state: CampaignState, executor: Executor, pool: ProposalPool, writer: LineageSink | None,
                 view: View | None, n: int = 1, resumed: int = 0, compared: set[str] | None = None) -> None:
        self.state, self.executor, self.pool, self.writer, self.view = state, executor, pool, writer, view
        self.n, self.resumed = max(1, n), resumed
        self.compared = set(compared or ())  # tasks some evaluation carried comparator figures for
        self.comparator_wait: comparators.ComparatorWait | None = None
        self.ready: deque[tuple[str, Pending]] = deque()  # (id, item): new, waiting for a slot
        self.ready_ids: set[str] = set()
        # Seeds among them: they are not the model's proposals, and at the start they must not
        # hold back its first requests (with two seeds for one GPU, none went out until the
        # baseline's cold evaluation was over, seconds added to the first latency).
        self.seeds_ready = 0
        self.queued: Counter[str] = Counter()  # ready candidates per task
        self.asked: Counter[str] = Counter()  # proposal requests outstanding per task
        self.in_flight: dict[str, Pending] = {}  # by candidate id
        self.counts: Counter[str] = Counter()  # evaluations, dropped, duplicates, errors
        # Per task: answered requests in a row that brought nothing new (reset by a correct
        # result, which may be a parent with new moves); its candidates submitted, not yet told.
        self.fruitless: Counter[str] = Counter()
        self.running: Counter[str] = Counter()
        self.certs_ready = 0  # certification requests in `ready` (at its front): not proposals
        self.started = time.perf_counter()
        self.poll_s = 0.0
        self.shown = 0.0
        self.noticed = 0  # the executor's notices passed on to the view so far

    def run(self) -> CampaignSummary:
        for ts in self.state.tasks.values():
            for seed in ts.seeds.values():
                self._queue(seed.candidate, seed.features)
        self._queue_certifications()  # what a resumed lineage left uncertified
        try:
            while True:
                self._close_spent()
                self._fill()
                self._note_exhausted()
                if not self.in_flight and not self.certs_ready and self._all_done():
                    break  # requests still in flight could not be used: they are abandoned
                self._show(self._poll())
            self._time_comparators()  # ended by itself: a Ctrl-C above skips this
        except BaseException:
            if self.view is not None:  # e.g. every worker lost: the view ends before the error line
                self.view.close(self._progress())
            raise
        if self.writer is not None:
            self.writer.flush()
        return self._summary()

    # ---- the loop's steps ----------------------------------------------------------------------

    def _fill(self) -> None:
        """Submit while slots are free; ask for as many proposals as the pool allows (each
        request built from its island as it is now)."""
        while True:
            self._collect()
            free = self.executor.free_slots()
            while free > 0 and (item := self._next_ready()) is not None:
                self._submit(*item)
                free = self.executor.free_slots()
            asks = self.pool.allowance(workers=free + len(self.in_flight), waiting=self._proposals_waiting(),
                                       free=free, n=self.n)
            for _ in range(asks):
                target = self._pick()
                if target is None:
                    return
                self.asked[target[0]] += 1
                self.pool.submit(self.state.request(target[0], target[1], self.n))
            if not asks:
                return

    def _next_ready(self) -> tuple[str, Pending] | None:
        """The next ready item to submit: the first (certifications are queued ahead of all), but
        past CERTIFYING_PER_WORKER certifications in flight a GPU worker the first candidate behind
        them: a certification waiting on its fresh sets' host builds holds a worker's slot, not its
        GPU, and the worker's other slots keep screening."""
        if not self.ready:
            return None
        if not self.ready[0][1].candidate.certify or self._certifying() < self._certifying_cap():
            return self.ready.popleft()
        for i, (key, item) in enumerate(self.ready):
            if not item.candidate.certify:
                del self.ready[i]
                return key, item
        return None

    def _certifying(self) -> int:
        """Certifications in flight."""
        return sum(1 for item in self.in_flight.values() if item.candidate.certify)

    def _certifying_cap(self) -> int:
        """Certifications in flight at most: CERTIFYING_PER_WORKER for each ready GPU worker."""
        return CERTIFYING_PER_WORKER * max(1, len(self.executor.workers().devices))

    def _pick(self) -> tuple[str, int] | None:
        """The task with the fewest evaluations committed, then its least-served island."""
        open_tasks = [ts for ts in self.state.tasks.values() if not self._done(ts, committed=True)
                      and self.fruitless[ts.task.name] < MAX_EMPTY_REQUESTS]
        if not open_tasks:
            return None
        ts = min(open_tasks, key=self._committed)
        island = min(ts.islands, key=lambda i: i.requests)
        return ts.task.name, island.index

    def _collect(self) -> None:
        """Move finished proposals' new candidates to the ready queue."""
        for answer in self.pool.collect():
            request, proposals = answer.request, answer.proposals
            self.asked[request.task.name] -= 1
            self.counts["dropped"] += proposals.dropped
            self.counts["errors"] += bool(answer.error)
            tokens = (proposals.prompt_tokens, proposals.completion_tokens)  # go on the first new one
            queued = 0
            for c in proposals.candidates:
                if c.task == request.task.name:
                    c = replace(c, island=request.island, generation=request.generation)
                    queued += self._queue(c, None, *(tokens if not queued else (None, None)))
            name = request.task.name
            self.fruitless[name] = 0 if queued else self.fruitless[name] + 1
            self.pool.answered(answer, queued)

    def _queue(self, cand: Candidate, features: frozenset[str] | None, prompt_tokens: int | None = None,
               completion_tokens: int | None = None) -> bool:
        """Queue a candidate not seen before (by id; features detected only then)."""
        key = cand.id
        if key in self.state.seen or key in self.ready_ids:
            self.counts["duplicates"] += 1
            return False
        self.ready_ids.add(key)
        self.ready.append((key, Pending(cand, detect(cand) if features is None else features, prompt_tokens,
                                        completion_tokens)))
        self.queued[cand.task] += 1
        self.seeds_ready += cand.origin.proposer == "seed"
        return True

    def _queue_certifications(self) -> None:
        """Certification requests for the results due (fsr.search.state), ahead of all other work."""
        while self.state.due:
            member = self.state.due.popleft()
            assert member.evaluation is not None
            request = certification.request(member.candidate, member.evaluation)
            self.ready.appendleft((request.id, Pending(request, member.features)))
            self.certs_ready += 1

    def _close_spent(self) -> None:
        """Tasks whose budget is spent and of which nothing runs are closed: in "end", what they
        owe is certified now (fsr.search.state.close); their notes go to the view."""
        if self.state.mode != "end":
            return
        for name, ts in self.state.tasks.items():
            if not ts.closed and not self.running[name] and self._done(ts):
                note = ts.note
                self.state.close(name)
                self._queue_certifications()
                self._note_changed(ts, note)

    def _note_changed(self, ts: TaskState, before: str) -> None:
        """The task's note, to the view where it changed (what its end left uncertified)."""
        if ts.note != before and self.view is not None:
            self.view.note(ts.note)

    def _proposals_waiting(self) -> int:
        """Ready candidates that a proposer made (not seeds, not certifications)."""
        return len(self.ready) - self.seeds_ready - self.certs_ready

    def _submit(self, key: str, item: Pending) -> bool:
        if item.candidate.certify:  # outside every budget: what is due is certified
            self.certs_ready -= 1
            self.in_flight[key] = replace(item, started_at=datetime.now(UTC))
            self.executor.submit(item.candidate)
            return True
        ts = self.state.tasks[item.candidate.task]
        self.queued[ts.task.name] -= 1
        self.ready_ids.discard(key)
        self.seeds_ready -= item.candidate.origin.proposer == "seed"
        if key in self.state.seen or self._done(ts):
            return False
        self.state.seen.add(key)
        ts.submitted += 1
        self.running[ts.task.name] += 1
        self.in_flight[key] = replace(item, started_at=datetime.now(UTC))
        self.executor.submit(item.candidate)
        return True

    def _poll(self) -> int:
        """Wait for results (briefly if proposals are outstanding) and tell them; how many."""
        timeout = PROPOSAL_POLL_S if self.pool.outstanding else POLL_S
        t0 = time.perf_counter()
        try:
            evaluations = self.executor.poll(timeout)
        finally:
            self.poll_s += time.perf_counter() - t0
            self._pass_on_notices()
        for ev in evaluations:
            self._tell(ev)
        return len(evaluations)

    def _pass_on_notices(self) -> None:
        """The executor's one-line reports (a worker lost, evaluations re-queued) go to the view."""
        notices = self.executor.workers().notices
        for line in notices[self.noticed:]:
            if self.view is not None:
                self.view.note(line)
        self.noticed = len(notices)

    def _tell(self, ev: Evaluation) -> None:
        item = self.in_flight.pop(ev.candidate_id, None)
        if item is None:
            return  # not ours (an executor bug): nothing to credit it to
        if comparators.carries(ev):
            self.compared.add(ev.task)
        if item.candidate.certify:
            self._tell_certification(item, ev)
            return
        if item.started_at is not None:
            self.pool.evaluated((datetime.now(UTC) - item.started_at).total_seconds(),
                                seed=item.candidate.origin.proposer == "seed")
        member = self.state.tell(item.candidate, ev, item.features)
        self.running[item.candidate.task] -= 1
        if member.ok:
            self.fruitless[item.candidate.task] = 0
        self.counts["evaluations"] += 1
        self._write(item, ev)
        self._queue_certifications()

    def _tell_certification(self, item: Pending, ev: Evaluation) -> None:
        """A certification's result, judged against its screening's timing (the paired bound),
        told to the state and written; it is not an evaluation (budget, rate, pace)."""
        request = item.candidate
        screened = self.state.tasks[request.task].awaiting.get(request.certify)
        ev = certification.as_certification(request, ev)
        if screened is not None and screened.evaluation is not None:
            ev = certification.judge(screened.evaluation, ev)
        note = self.state.tasks[request.task].note
        self.state.certified(request, ev)
        self._note_changed(self.state.tasks[request.task], note)
        self.counts["certifications"] += 1
        self.counts["uncertified"] += not ev.certified
        self._write(item, ev)
        self._queue_certifications()

    def _write(self, item: Pending, ev: Evaluation) -> None:
        if self.writer is not None:
            self.writer.append(item.candidate, ev, features_detected=sorted(item.features),
                               started_at=item.started_at, finished_at=datetime.now(UTC),
                               prompt_tokens=item.prompt_tokens, completion_tokens=item.completion_tokens)

    def _time_comparators(self) -> None:
        """The comparators no evaluation carried, asked for within the configured bound."""
        bound_s = self.state.config.comparators_wait_s
        untimed = [name for name in self.state.tasks if name not in self.compared]
        if untimed and bound_s > 0:
            self.comparator_wait = comparators.time_untimed(self.executor, untimed, bound_s, self.view)

    # ---- budgets and reporting ----------------------------------------------------------------

    def _committed(self, ts: TaskState) -> int:
        name = ts.task.name
        return ts.submitted + self.queued[name] + self.asked[name] * self.n

    def _stop_reasons(self, ts: TaskState, committed: bool = False) -> list[str]:
        cfg = self.state.config
        used = self._committed(ts) if committed else ts.submitted
        reasons = []
        if used >= cfg.max_evaluations:
            reasons.append("evaluations")
        if cfg.max_wall_s and self.state.prior_wall_s + self._elapsed() >= cfg.max_wall_s:
            reasons.append("wall time")
        if cfg.target_speedup and (ts.best_speedup or 0.0) >= cfg.target_speedup:
            reasons.append("target speedup")
        if self._exhausted(ts.task.name):
            reasons.append("exhausted")
        return reasons

    def _exhausted(self, name: str) -> bool:
        """Nothing new came of the task's last requests, and nothing of it waits or runs."""
        return (self.fruitless[name] >= MAX_EMPTY_REQUESTS and not self.running[name]
                and not self.queued[name] and not self.asked[name])

    def _note_exhausted(self) -> None:
        """One line for each task newly exhausted (within its budgets): what it reached, and
        what would let it go further."""
        for name, ts in self.state.tasks.items():
            if ts.note or not self._exhausted(name):
                continue
            hint = self.pool.proposer.describe(ts.task).exhausted_hint
            best = f"best {speedup_words(ts.best_speedup, ts.speedup_basis)}" if ts.best_speedup \
                else "none certified yet" if ts.leader is not None and ts.best is None else "no correct kernel"
            ts.note = (f"{name}: nothing new to try after {ts.finished} evaluations ({best}); "
                       + (f"to go further: {hint}" if hint else "the proposer has no more"))
            if self.view is not None:
                self.view.note(ts.note)

    def _done(self, ts: TaskState, committed: bool = False) -> bool:
        return bool(self._stop_reasons(ts, committed))

    def _all_done(self) -> bool:
        return all(self._done(ts) for ts in self.state.tasks.values())

    def _elapsed(self) -> float:
        return time.perf_counter() - self.started

    def _progress(self) -> Progress:
        free = self.executor.free_slots()
        pace = self.pool.stats(workers=free + len(self.in_flight), waiting=self._proposals_waiting(),
                               idle_workers=free if not self.ready else 0)
        return snapshot(self.state, self._elapsed(), self.counts["evaluations"], len(self.in_flight),
                        self.executor.workers().busy_fraction, self.counts, pace,
                        certifying=self.certs_ready + self._certifying())

    def _show(self, told: int) -> None:
        """Update the view after results came in, or every VIEW_EVERY_S (elapsed time moves)."""
        if self.view is not None and (told or self._elapsed() - self.shown >= VIEW_EVERY_S):
            self.shown = self._elapsed()
            self.view.update(self._progress())

    def _summary(self) -> CampaignSummary:
        progress = self._progress()
        if self.view is not None:
            self.view.close(progress)
        reasons = sorted({r for ts in self.state.tasks.values() for r in self._stop_reasons(ts)})
        wall = self._elapsed()
        waited = self.comparator_wait.spent_s if self.comparator_wait else 0.0
        return CampaignSummary(progress, self.resumed, wall, wall - self.poll_s - waited,
                               ", ".join(reasons) or "exhausted", self.comparator_wait)
