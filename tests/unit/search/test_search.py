"""The search without a GPU: selection, migration, deduplication, budgets, determinism, replay,
asynchrony, several tasks, slow proposers, and the views."""

from __future__ import annotations

import io
import random
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import pytest

from fsr.candidate import parse
from fsr.config import SearchConfig
from fsr.propose.base import ProposalRequest, Proposals, ProposerTraits, Scored, answered_now
from fsr.propose.mutate import MutateProposer
from fsr.search import select
from fsr.search.island import Island, settings_for
from fsr.search.loop import run_campaign
from fsr.search.migrate import migrate
from fsr.search.pace import Ceilings
from fsr.search.state import CampaignState
from fsr.testing.fakes import FakeEvaluator, FakeExecutor, ListWriter, ReplayEvaluator, softmax_task, timing
from fsr.types import DeviceInfo, Evaluation, Task, Verdict
from fsr.view import LineView, LiveView, make_view

TASK = softmax_task()
BASE = parse(TASK.baseline_source, TASK)


def member(i: int, latency_us: float, features: set[str] = frozenset()) -> Scored:
    cand = replace(BASE, defines=(("BLOCK", 32 * (i + 1)),))
    ev = Evaluation(cand.id, TASK.name, Verdict.OK, timing=timing(latency_us), baseline_us=1000.0)
    return Scored(cand, ev, frozenset(features))


def failed(i: int, parents: tuple[str, ...] = ()) -> Scored:
    cand = replace(BASE, defines=(("BLOCK", 7 * (i + 1)),), parents=parents)
    return Scored(cand, Evaluation(cand.id, TASK.name, Verdict.WRONG, message="mismatch at 3"))


def search(executor=None, config=None, tasks=(TASK,), **kw):
    executor = executor or FakeExecutor(FakeEvaluator(effects={"VEC4": 2.0, "WARP_SHUFFLE": 1.3}), slots=8)
    config = config or SearchConfig(max_evaluations=60, seed=1)
    return run_campaign(list(tasks), executor, kw.pop("proposer", MutateProposer()), config, **kw), executor


# ---- selection and islands ----------------------------------------------------------------------

def test_tournament_over_everyone_without_diversity_picks_the_fastest():
    pop = [member(i, lat) for i, lat in enumerate([300.0, 100.0, 200.0])]
    assert select.tournament(pop, 3, random.Random(0)).id == pop[1].id


def test_diversity_term_can_prefer_a_slightly_slower_different_kernel():
    pop = [member(0, 100.0, {"VEC4"}), member(1, 105.0, {"ONLINE", "SMEM_TILE"}), member(2, 101.0, {"VEC4"})]
    reference = [pop[0], pop[2]]
    assert select.tournament(pop, 3, random.Random(0), 0.0, reference).id == pop[0].id
    assert select.tournament(pop, 3, random.Random(0), 0.5, reference).id == pop[1].id


def test_trim_keeps_elites_and_drops_the_oldest_others():
    pop = [member(i, lat) for i, lat in enumerate([50.0, 400.0, 300.0, 200.0, 100.0])]
    kept = select.trim(pop, population=3, elite_count=2)
    assert [m.id for m in kept] == [pop[0].id, pop[3].id, pop[4].id]


def test_jaccard_distance():
    from fsr.propose.features import jaccard_distance
    assert jaccard_distance(frozenset({"A", "B"}), frozenset({"B", "C"})) == pytest.approx(2 / 3)
    assert jaccard_distance(frozenset(), frozenset()) == 0.0


def island(index: int = 0, **cfg) -> Island:
    config = SearchConfig(**{"population": 4, "elites": 2, **cfg})
    return Island(index, settings_for(config, "softmax", index), config)


def test_island_keeps_correct_members_and_remembers_failures_for_feedback():
    isl = island()
    parent = member(0, 100.0)
    isl.tell(parent)
    isl.tell(failed(1, parents=(parent.id,)))
    isl.tell(failed(2))
    assert [m.id for m in isl.population] == [parent.id]
    assert isl.recent_failures({parent.id})[0].evaluation.message == "mismatch at 3"
    assert len(isl.recent_failures({"nobody"})) == 2


def test_island_asks_two_different_parents_once_it_can():
    isl = island()
    assert isl.ask(random.Random(0)) == ()
    isl.tell(member(0, 100.0))
    assert len(isl.ask(random.Random(0))) == 1
    isl.tell(member(1, 120.0))
    a, b = isl.ask(random.Random(0))
    assert a.id != b.id


def test_migration_moves_the_best_to_the_next_island_as_the_same_member():
    islands = [island(i) for i in range(3)]
    for i, isl in enumerate(islands):
        isl.tell(member(i, 100.0 + i))
        isl.tell(member(10 + i, 500.0 + i))
    moves = migrate(islands, count=1)
    assert [(m.source, m.target) for m in moves] == [(0, 1), (1, 2), (2, 0)]
    assert islands[1].population[-1] is islands[0].population[0]  # not a copy
    again = migrate(islands, count=1)  # the best travel on round by round, never duplicated
    assert all(m.source != 0 for m in again)  # island 0's best is already on island 1
    for isl in islands:
        assert len({m.id for m in isl.population}) == len(isl.population)
    assert migrate(islands, count=0) == []


def test_request_carries_best_contrast_failures_and_policy_features():
    state = CampaignState([TASK], SearchConfig(islands=2, seed=0), lambda t: MutateProposer().describe(t).features)
    fast, slow = member(0, 100.0, {"VEC4"}), member(1, 400.0)
    for m in (fast, slow):
        state.tell(m.candidate, m.evaluation, m.features)
    bad = failed(3, parents=(fast.id,))
    state.tell(bad.candidate, bad.evaluation, frozenset())
    req = state.request(TASK.name, 0, n=2)
    assert req.best.id == fast.id and req.contrast.id == slow.id and req.n == 2
    assert req.parents and req.generation == 1
    assert req.features_wanted or req.features_unwanted
    if fast.id in {p.id for p in req.parents}:
        assert req.failures and req.failures[0].id == bad.id


# ---- the loop -----------------------------------------------------------------------------------

def test_budget_is_exact_and_nothing_is_evaluated_twice():
    summary, ex = search()
    assert summary.evaluations == 60 == len(ex.submitted) == len(set(ex.submitted))
    assert summary.stopped_by == "evaluations"
    assert summary.tasks[0].finished == 60


def test_seeds_are_the_baseline_and_the_template_at_default_features():
    writer = ListWriter()
    search(writer=writer)
    first = [c for c, _, _ in writer.rows if c.origin.proposer == "seed"]
    assert {c.origin.move for c in first} == {"baseline", "template"}
    assert parse(TASK.template_source, TASK).id in {c.id for c in first}


def test_search_finds_the_planted_optimum():
    summary, _ = search(config=SearchConfig(max_evaluations=150, seed=2))
    # VEC4 2x and WARP_SHUFFLE 1.3x of a 1000 us baseline, with up to 2% noise
    assert summary.tasks[0].best_us < 1000 / 2.6 * 1.03


class Stubborn:
    """A proposer that always writes the same kernel."""

    exhausted = False

    def describe(self, task: Task) -> ProposerTraits:
        return ProposerTraits(writes_first_kernel=False, features=(), exhausted_hint="")

    def propose(self, request: ProposalRequest) -> Proposals:
        return Proposals((replace(BASE, defines=(("BLOCK", 64),), parents=(request.parents[0].id,)),))

    def start(self, request: ProposalRequest) -> Future[Proposals]:
        return answered_now(self.propose, request)


def test_duplicates_are_dropped_before_any_gpu_time():
    summary, ex = search(proposer=Stubborn())
    assert len(ex.submitted) == len(set(ex.submitted)) == 3  # the two seeds and the one variant
    assert summary.progress.duplicates_dropped > 0 and summary.stopped_by == "exhausted"


def test_a_paced_proposer_that_repeats_itself_ends_the_search_too():
    summary, ex = search(proposer=Stubborn(), pace=Ceilings(max_in_flight=3))
    assert len(ex.submitted) == 3 and summary.stopped_by == "exhausted"


def test_failing_candidates_are_values_and_the_search_goes_on():
    evaluator = FakeEvaluator(fail_features={"ONLINE": Verdict.COMPILE_ERROR}, fail_fraction=0.2)
    summary, _ = search(FakeExecutor(evaluator, slots=8))
    verdicts = dict(summary.tasks[0].verdicts)
    assert verdicts["OK"] > 0 and verdicts.get("COMPILE_ERROR", 0) + verdicts.get("WRONG", 0) > 0
    assert sum(verdicts.values()) == 60


def test_same_seed_same_search_other_seed_other_search():
    ids = [search(config=SearchConfig(max_evaluations=50, seed=s))[1].submitted for s in (7, 7, 8)]
    assert ids[0] == ids[1] and ids[0] != ids[2]


def test_replaying_recorded_evaluations_reproduces_the_search():
    writer = ListWriter()
    first, _ = search(writer=writer, config=SearchConfig(max_evaluations=50, seed=4))
    recorded = {e.candidate_id: e for _, e, _ in writer.rows}
    replay, ex = search(FakeExecutor(ReplayEvaluator(recorded), slots=8), SearchConfig(max_evaluations=50, seed=4))
    assert set(ex.submitted) == set(recorded)
    assert replay.tasks[0].best_id == first.tasks[0].best_id


def test_no_generation_barrier_slots_stay_full_with_uneven_evaluation_times():
    ex = FakeExecutor(FakeEvaluator(), slots=8, eval_s=lambda c: 1.0 + 9.0 * (int(c.id[:2], 16) % 2))
    search(ex, SearchConfig(max_evaluations=200, seed=0))
    assert ex.workers().busy_fraction > 0.9


def test_lineage_rows_carry_features_times_and_origin():
    writer = ListWriter()
    search(writer=writer)
    assert len(writer.rows) == 60 and writer.flushes >= 1
    for cand, ev, extra in writer.rows:
        assert cand.id == ev.candidate_id
        assert extra["started_at"] <= extra["finished_at"]
        assert isinstance(extra["features_detected"], list)
    children = [c for c, _, _ in writer.rows if c.origin.proposer == "mutate"]
    assert children and all(c.parents and c.generation >= 1 for c in children)
    assert any(c.island != 0 for c in children)


def test_tasks_share_the_executor_and_each_gets_its_budget():
    other = replace(softmax_task(None), name="softmax_b")
    writer = ListWriter()
    summary, ex = search(tasks=(TASK, other), config=SearchConfig(max_evaluations=30, seed=0), writer=writer)
    assert [t.finished for t in summary.tasks] == [30, 30] and len(set(ex.submitted)) == 60
    first = [c.task for c, _, _ in writer.rows[:20]]
    assert 5 <= first.count("softmax_b") <= 15  # balanced as it goes, not one task after the other


def test_target_speedup_stops_early():
    summary, _ = search(config=SearchConfig(max_evaluations=500, target_speedup=1.9, seed=0))
    assert summary.stopped_by == "target speedup" and summary.evaluations < 500
    assert summary.tasks[0].best_speedup >= 1.9


def test_wall_time_budget_stops_the_search():
    ex = FakeExecutor(FakeEvaluator(), slots=4, eval_s=0.02, real_time=True)
    start = time.monotonic()
    summary, _ = search(ex, SearchConfig(max_evaluations=10_000, max_wall_s=0.4, seed=0))
    assert "wall time" in summary.stopped_by and time.monotonic() - start < 2.0
    assert 10 < summary.evaluations < 200


class SlowProposer:
    """A stand-in for a language model: seconds become milliseconds; every fifth call fails."""

    name = "slow"

    def __init__(self) -> None:
        self.inner = MutateProposer()
        self.calls = 0
        self.active = self.max_active = 0
        self.threads: set[str] = set()
        self.devices: set[DeviceInfo | None] = set()  # what the requests said of the GPU
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(4, "slow-model")  # the model's own workers, not the loop's

    def start(self, request: ProposalRequest) -> Future[Proposals]:
        return self.pool.submit(self.propose, request)

    exhausted = False

    def describe(self, task: Task) -> ProposerTraits:
        return self.inner.describe(task)

    def propose(self, request: ProposalRequest) -> Proposals:
        with self.lock:
            self.devices.add(request.device)
            self.calls += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.threads.add(threading.current_thread().name)
            fail = self.calls % 5 == 0
        time.sleep(0.02)
        with self.lock:
            self.active -= 1
        if fail:
            raise RuntimeError("endpoint said 503")
        out = self.inner.propose(request)
        return replace(out, prompt_tokens=100, completion_tokens=50)


def test_slow_proposals_run_alongside_evaluations():
    proposer, writer = SlowProposer(), ListWriter()
    ex = FakeExecutor(FakeEvaluator(), slots=4, eval_s=0.02, real_time=True)
    summary, _ = search(ex, SearchConfig(max_evaluations=40, seed=0), proposer=proposer,
                        writer=writer, pace=Ceilings(max_in_flight=4))
    assert summary.evaluations == 40 and summary.progress.proposer_errors > 0
    assert len(proposer.threads) > 1 and all(t.startswith("slow-model") for t in proposer.threads)
    assert any(extra["prompt_tokens"] == 100 for _, _, extra in writer.rows)
    assert proposer.max_active > 1 and summary.wall_s < proposer.calls * 0.02  # they overlapped


def test_a_paced_proposers_requests_name_the_gpu_and_inline_ones_need_not_wait_for_it():
    ex = FakeExecutor(FakeEvaluator(), slots=2, models=("NVIDIA H100 80GB HBM3",))
    paced = SlowProposer()
    search(ex, SearchConfig(max_evaluations=8, seed=0), proposer=paced, pace=Ceilings(max_in_flight=2))
    assert {d.name if d else None for d in paced.devices} == {"NVIDIA H100 80GB HBM3"}
    inline = SlowProposer()
    search(ex, SearchConfig(max_evaluations=8, seed=0), proposer=inline)
    assert inline.devices == {None}  # inline: the workers are not waited for to learn their GPU


def test_importing_the_search_loads_neither_ray_nor_cupy():
    code = ("import sys, fsr.search.loop, fsr.search.state, fsr.propose.mutate, fsr.view; "
            "bad = [m for m in ('ray', 'cupy', 'rich') if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=".")
    assert out.returncode == 0, out.stdout + out.stderr


# ---- views --------------------------------------------------------------------------------------

def test_line_view_prints_every_n_evaluations_and_at_the_end():
    stream = io.StringIO()
    summary, _ = search(view=LineView(stream, every=20))
    lines = [line for line in stream.getvalue().splitlines() if not line.startswith("fsr: ")]  # not the notes
    assert 2 <= len(lines) <= 4 and "softmax: 60/60" in lines[-1] and "evals 60" in lines[-1]
    assert "gpu evaluating" in lines[-1]


def test_live_view_renders_tasks_and_islands():
    from rich.console import Console
    summary, _ = search(config=SearchConfig(max_evaluations=30, islands=3, seed=0))
    console = Console(file=io.StringIO(), width=140)
    console.print(LiveView.render(summary.progress))
    text = console.file.getvalue()
    assert "softmax" in text and "30/30" in text and "speedup" in text and text.count("\n") >= 5


def test_make_view_is_plain_off_a_terminal():
    assert isinstance(make_view(io.StringIO()), LineView)



def test_background_sink_keeps_order_and_surfaces_writer_errors():
    from fsr.search.sink import BackgroundSink

    inner = ListWriter()
    sink = BackgroundSink(inner)
    members = [member(i, 100.0 + i) for i in range(50)]
    for m in members:
        sink.append(m.candidate, replace(m.evaluation, worker="w"))
    sink.flush()
    assert [c.id for c, _, _ in inner.rows] == [m.id for m in members] and inner.flushes == 1

    class Full(ListWriter):
        def append(self, candidate, evaluation, **extra):
            raise OSError("disk full")

    broken = BackgroundSink(Full())
    broken.append(members[0].candidate, members[0].evaluation)
    with pytest.raises(RuntimeError, match="disk full"):
        broken.flush()
    sink.close()
    sink.close()
