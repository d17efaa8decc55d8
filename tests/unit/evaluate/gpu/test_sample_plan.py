"""The timed-output check's bookkeeping, without a GPU: which runs start from a decoy (picked
from OS entropy, so no two timings need agree), which slot each run's check counts into, and the
WRONG message naming the run a mismatch happened in."""

from __future__ import annotations

from fsr.evaluate.gpu import sample_plan
from fsr.evaluate.gpu.sample_plan import SLOTS, Run, SamplePlan


def test_picks_are_distinct_indices_of_the_window():
    for window, count in [(5, 2), (1, 2), (0, 2), (10, 0)]:
        picks = sample_plan.random_picks(window, count)
        assert len(picks) == min(window, count) and all(0 <= i < window for i in picks)


def test_picks_are_not_the_same_from_timing_to_timing():
    seen = {sample_plan.random_picks(5, 2) for _ in range(60)}
    assert len(seen) > 3  # 10 possible pairs; fsr's seed plays no part


def test_each_queued_run_gets_its_own_slot_its_set_and_whether_it_is_a_decoy():
    plan = SamplePlan(sets=3, window=5, picks=frozenset({1, 3}))
    started = [plan.start(i) for i in [0, 1, 2, 0, 1, 2, 3, 4]]  # a warm-up of 3, then 5 timed
    assert [slot for slot, _ in started] == list(range(8))
    assert [run.input_set for _, run in started] == [0, 1, 2, 0, 1, 2, 0, 1]
    assert [run.decoy for _, run in started] == [False, True, False, False, True, False, True, False]
    assert plan.last_per_set() == {0: Run(3, 0, True), 1: Run(4, 1, False), 2: Run(2, 2, False)}


def test_the_first_run_with_wrong_elements_is_named_and_a_clean_timing_passes():
    plan = SamplePlan(sets=2, window=4, picks=frozenset({2}))
    for i in range(6):
        plan.start(i)
    assert plan.first_wrong([0] * SLOTS) is None
    counts = [0] * SLOTS
    counts[2], counts[4] = 7, 1
    run, wrong, shared = plan.first_wrong(counts)
    assert (run, wrong, shared) == (Run(2, 0, True), 7, False)
    message = sample_plan.describe(run, wrong, 100, shared)
    assert "timed run 3" in message and "decoy" in message and "7 of 100" in message
    assert "decoy" not in sample_plan.describe(Run(4, 0, False), 1, 100, False)


def test_counts_past_the_runs_queued_are_ignored():
    plan = SamplePlan(sets=1, window=0)
    plan.start(0)
    counts = [0] * SLOTS
    counts[1] = 5  # no run there
    assert plan.first_wrong(counts) is None


def test_runs_past_the_slots_share_the_last_one_and_say_so():
    plan = SamplePlan(sets=3, window=0)
    slots = [plan.start(i % 300)[0] for i in range(SLOTS + 10)]
    assert slots[SLOTS - 2] == SLOTS - 2 and set(slots[SLOTS - 1:]) == {SLOTS - 1}
    counts = [0] * SLOTS
    counts[SLOTS - 1] = 2
    run, _, shared = plan.first_wrong(counts)
    assert shared and f"after the first {SLOTS}" in sample_plan.describe(run, 2, 10, shared)
