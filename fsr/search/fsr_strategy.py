"""The FSR loop of CUDA-LLM (arXiv 2506.09092) as written in the paper: a baseline for the island
search, with the same budget semantics and the same lineage, so the two can be compared.

One line of descent, in rounds. The task's plain baseline kernel is evaluated first and is the
first parent. Each round asks the proposer for N candidates from the current parent, submits
them all to the executor and waits until all are back. If none passes, the next prompt carries
their errors and the history of failures, and the parent stays (correctness reinforcement);
once some pass, the fastest correct kernel so far becomes the parent and is sent back with its
timings, beside the next-fastest (performance reinforcement). It stops after D rounds (every
round counts, passing or not), or when a budget is spent: evaluations (the baseline counts, as
seeds do in the island search), wall time, a target speedup, or the proposer's token or money
budget. The fastest correct kernel wins.

A task without a baseline kernel (an imported one) starts with no parent: its first rounds ask
the proposer (a model) to write a kernel from the task's description, failures carried as above,
until one passes (its speedups are then over PyTorch eager, fsr.propose.base.task_speedup).

Where the campaign certifies (`eval.certify` any mode but "off"), a round's result faster than
the best is certified (fsr.certification) before it becomes the best and the next parent; one that
fails certification is one of the round's failures, carried in the next prompt. Certifications are
not evaluations. This is the "leads" mode in every certifying mode, "end" included: the loop waits
for its whole round anyway and its best is the next parent, so it certifies only rounds that
improve the best, a cost the island search's "end" mode exists to avoid.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter, deque
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from fsr import certification
from fsr.candidate import parse
from fsr.config import SearchConfig, certify_mode
from fsr.execute.base import DEVICE_WAIT_S, Executor
from fsr.propose.base import ProposalRequest, Proposals, Proposer, Scored, has_baseline, propose, task_speedup
from fsr.propose.features import detect
from fsr.search.sink import LineageSink
from fsr.types import Candidate, Evaluation, Origin, Task

POLL_S = 0.5
FAILURES_SHOWN = 4  # failed attempts carried in a prompt, most recent first


@dataclass(frozen=True)
class Round:
    """One round: what was asked, what came back, and the fastest latency after it."""

    index: int
    parent: str  # candidate id the prompt asked to improve ("" for a request to write a first kernel)
    proposed: int  # valid candidates returned by the proposer
    evaluated: int  # new ones evaluated (duplicates of earlier kernels are not)
    passed: int
    best_us: float | None
    errors: tuple[str, ...]  # the proposer's: endpoint failures and unusable replies


@dataclass(frozen=True)
class FsrSummary:
    """What `run_fsr` returns: the winner (None if nothing passed) and how the run went."""

    best: Scored | None
    rounds: tuple[Round, ...]
    evaluations: int
    verdicts: tuple[tuple[str, int], ...]
    stopped_by: str  # "depth", "evaluations", "wall time", "target speedup", "proposer budget"
    prompt_tokens: int
    completion_tokens: int
    wall_s: float

    @property
    def best_candidate(self) -> Candidate | None:
        return self.best.candidate if self.best else None

    @property
    def best_evaluation(self) -> Evaluation | None:
        return self.best.evaluation if self.best else None


def run_fsr(task: Task, executor: Executor, proposer: Proposer, config: SearchConfig,
            writer: LineageSink | None, depth: int, n_per_round: int, certify: str | bool = "off") -> FsrSummary:
    """Run the FSR loop on one task to `depth` rounds of `n_per_round` candidates (see the module
    docstring). `config` supplies max_evaluations, max_wall_s, target_speedup and seed. The
    caller owns and closes executor and writer (flushed here at the end). `certify` (a mode of
    `eval.certify`): unless "off", a round's result faster than the best is certified before it
    becomes the best (fsr.certification; "leads" in every mode); one that fails is a failure of
    the round."""
    device = executor.workers(DEVICE_WAIT_S).device  # what the prompts describe
    run = _Run(task, executor, writer, config, certify_mode(certify) != "off")
    parent = _baseline(run) if has_baseline(task) else None  # None: the model writes the first kernel
    failures: deque[Scored] = deque(maxlen=FAILURES_SHOWN)
    rounds: list[Round] = []
    stopped = "depth"
    for index in range(1, max(0, depth) + 1):
        reason = run.stop_reason(proposer)
        if reason:
            stopped = reason
            break
        n = min(max(1, n_per_round), config.max_evaluations - run.evaluations)
        request = ProposalRequest(task=task, parents=(parent,) if parent else (), n=n, seed=_seed(config.seed, task.name, index),
                                  island=0, generation=index, best=run.best, contrast=run.second(),
                                  failures=tuple(failures), device=device)
        proposals = _propose(proposer, request)
        run.tokens(proposals)
        scored = run.evaluate([replace(c, island=0, generation=index) for c in proposals.candidates], proposals)
        failures.extendleft(s for s in scored if not s.ok)  # most recent first
        passed = [s for s in scored if s.ok]
        if run.best is not None and run.best.ok:
            parent = run.best  # performance reinforcement: improve the fastest so far
        rounds.append(Round(index, request.parents[0].id if request.parents else "", len(proposals.candidates), len(scored), len(passed),
                            run.best.latency_us if run.best else None, proposals.errors))
    if writer is not None:
        writer.flush()
    return FsrSummary(run.best, tuple(rounds), run.evaluations, tuple(sorted(run.verdicts.items())), stopped,
                      run.prompt_tokens, run.completion_tokens, time.perf_counter() - run.started)


def _baseline(run: _Run) -> Scored:
    """The task's baseline, evaluated first: the first parent."""
    baseline = parse(run.task.baseline_source, run.task, Origin(proposer="seed", move="baseline"))
    evaluated = run.evaluate([baseline], Proposals((baseline,)))
    return evaluated[0] if evaluated else Scored(baseline, None, detect(baseline))


def _propose(proposer: Proposer, request: ProposalRequest) -> Proposals:
    try:
        return propose(proposer, request)
    except Exception as e:  # a proposer's own fault: the round is spent, the run goes on
        return Proposals((), errors=(f"{type(e).__name__}: {e}",))


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "big") >> 1


class _Run:
    """The state of one FSR run: evaluated kernels, the best, budgets, token counts."""

    def __init__(self, task: Task, executor: Executor, writer: LineageSink | None, config: SearchConfig,
                 certify: bool = False) -> None:
        self.task, self.executor, self.writer, self.config = task, executor, writer, config
        self.certify = certify
        self.contenders: list[Scored] = []  # this round's results faster than the best, to certify
        self.started = time.perf_counter()
        self.seen: set[str] = set()
        self.ok: list[Scored] = []  # correct kernels, fastest first
        self.evaluations = 0
        self.verdicts: Counter[str] = Counter()
        self.prompt_tokens = self.completion_tokens = 0

    @property
    def best(self) -> Scored | None:
        return self.ok[0] if self.ok else None

    def second(self) -> Scored | None:
        """The next-fastest correct kernel: the contrast shown beside the best."""
        return self.ok[1] if len(self.ok) > 1 else None

    def tokens(self, proposals: Proposals) -> None:
        self.prompt_tokens += proposals.prompt_tokens or 0
        self.completion_tokens += proposals.completion_tokens or 0

    def stop_reason(self, proposer: Proposer) -> str:
        cfg = self.config
        if self.evaluations >= cfg.max_evaluations:
            return "evaluations"
        if cfg.max_wall_s and time.perf_counter() - self.started >= cfg.max_wall_s:
            return "wall time"
        speedup = task_speedup(self.task, self.best.evaluation) if self.best else None
        if cfg.target_speedup and (speedup or 0.0) >= cfg.target_speedup:
            return "target speedup"
        if proposer.exhausted:
            return "proposer budget"
        return ""

    def evaluate(self, candidates: list[Candidate], proposals: Proposals) -> list[Scored]:
        """Submit the new candidates (within the evaluation budget), wait for all, record them."""
        fresh: list[Candidate] = []
        for c in candidates:
            if c.id not in self.seen and self.evaluations + len(fresh) < self.config.max_evaluations:
                self.seen.add(c.id)
                fresh.append(c)
        tokens = {c.id: ((proposals.prompt_tokens, proposals.completion_tokens) if i == 0 else (None, None))
                  for i, c in enumerate(fresh)}  # a call's tokens go on its first row, as in the loop
        waiting = deque(fresh)
        in_flight: dict[str, Candidate] = {}
        started: dict[str, datetime] = {}
        results: dict[str, Scored] = {}
        while waiting or in_flight:
            while waiting and self.executor.free_slots() > 0:
                c = waiting.popleft()
                in_flight[c.id] = c
                started[c.id] = datetime.now(UTC)
                self.executor.submit(c)
            for ev in self.executor.poll(POLL_S):
                cand = in_flight.pop(ev.candidate_id, None)
                if cand is not None:
                    results[cand.id] = self._record(cand, ev, started[cand.id], tokens[cand.id])
        results.update((m.id, m) for m in self._certify())
        return [results[c.id] for c in fresh if c.id in results]

    def _certify(self) -> list[Scored]:
        """The round's results faster than the best, fastest first: each certified (then it is
        the best, and the slower ones are plain results) or failed (a failure of the round)."""
        failed = []
        for member in sorted(self.contenders, key=lambda m: m.latency_us):
            screened = member.evaluation
            assert screened is not None
            if self.best is None or member.latency_us < self.best.latency_us:
                request = certification.request(member.candidate, screened)
                started = datetime.now(UTC)
                self.executor.submit(request)
                ev = certification.judge(screened, certification.as_certification(request, self._wait(request.id)))
                self._write(request, ev, started, member.features, (None, None))
                if not ev.certified:
                    failed.append(Scored(member.candidate, certification.feedback(member.candidate, ev), member.features))
                    continue
            self.ok.append(member)
            self.ok.sort(key=lambda s: s.latency_us)
        self.contenders = []
        return failed

    def _wait(self, candidate_id: str) -> Evaluation:
        """Poll until the evaluation of `candidate_id` comes back (nothing else is in flight)."""
        while True:
            for ev in self.executor.poll(POLL_S):
                if ev.candidate_id == candidate_id:
                    return ev

    def _record(self, cand: Candidate, ev: Evaluation, started_at: datetime,
                tokens: tuple[int | None, int | None]) -> Scored:
        member = Scored(cand, ev, detect(cand))
        self.evaluations += 1
        self.verdicts[str(ev.verdict)] += 1
        if member.ok and self.certify and (self.best is None or member.latency_us < self.best.latency_us):
            self.contenders.append(member)
        elif member.ok:
            self.ok.append(member)
            self.ok.sort(key=lambda s: s.latency_us)
        self._write(cand, ev, started_at, member.features, tokens)
        return member

    def _write(self, cand: Candidate, ev: Evaluation, started_at: datetime, features: frozenset[str],
               tokens: tuple[int | None, int | None]) -> None:
        if self.writer is not None:
            self.writer.append(cand, ev, features_detected=sorted(features), started_at=started_at,
                               finished_at=datetime.now(UTC), prompt_tokens=tokens[0], completion_tokens=tokens[1])
