"""The side-channel corpus on a real GPU: every honest twin is OK; every cheat gets the verdict
its header expects once the defences it names are built, with a message naming the defence, or,
where the defence makes it honest (state-reset), is OK and no faster than its twin. And a bad
tunable value costs that configuration, not the candidate.

`FSR_TEST_CHEATS_TODAY=1` runs one more test, for the corpus itself: every cheat fools an
evaluator without the defences (OK, and faster than its twin), printing the fake speedups; it
fails against this evaluator by design (run it on a checkout from before the defences).
"""

from __future__ import annotations

import os
import time

import pytest

from fsr import candidate, tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Evaluation, Verdict, WorkerSpec

from .corpus import DEFENCES, Entry, bad_configurations, side_channels

pytestmark = pytest.mark.gpu
CHEATS = side_channels()
CONFIGS = bad_configurations()
NOT_FASTER = 0.9  # a cheat made honest runs at its twin's speed (its stash writes may slow it)
CANDIDATE_TIMEOUT_S = 30.0


def corpus_evaluator(trials: int) -> GpuEvaluator:
    """An evaluator for every task the corpus uses."""
    names = sorted({e.task for pair in CHEATS for e in pair} | {e.task for e in CONFIGS})
    config = Config(eval=EvalConfig(timeout_s=CANDIDATE_TIMEOUT_S, torch_compile="off"), tune=TuneConfig(trials=trials))
    return GpuEvaluator(WorkerSpec.of(config, [tasks.load(n) for n in names]))


@pytest.fixture(scope="module")
def evaluator():
    ev = corpus_evaluator(0)
    yield ev
    ev.close()


_twins: dict[str, Evaluation] = {}


def evaluate(ev: GpuEvaluator, entry: Entry) -> Evaluation:
    return ev.evaluate(candidate.parse(entry.path.read_text(), tasks.load(entry.task)))


def twin_result(ev: GpuEvaluator, twin: Entry) -> Evaluation:
    if twin.name not in _twins:
        _twins[twin.name] = evaluate(ev, twin)
    return _twins[twin.name]


@pytest.mark.parametrize("cheat,twin", CHEATS, ids=[t.name for _, t in CHEATS])
def test_honest_twin_is_ok(evaluator, cheat, twin):
    result = twin_result(evaluator, twin)
    assert result.verdict == Verdict.OK, f"{twin.name}: {result.verdict} {result.message[:400]}"


@pytest.mark.parametrize("cheat,twin", CHEATS, ids=[c.name for c, _ in CHEATS])
def test_cheat_is_stopped_by_its_defence(evaluator, cheat, twin):
    honest = twin_result(evaluator, twin)
    assert honest.verdict == Verdict.OK, honest.message
    result = evaluate(evaluator, cheat)
    assert result.verdict == Verdict(cheat.expect), f"{cheat.name}: {result.verdict} {result.message[:400]}"
    if result.verdict == Verdict.OK:  # made honest: no faster than its twin
        assert result.timing and honest.timing
        ratio = honest.timing.median_us / result.timing.median_us
        assert ratio < 1 / NOT_FASTER, f"{cheat.name}: {ratio:.2f}x its twin's speed although {cheat.caught_by[0]}"
    else:
        words = [w for d in cheat.caught_by for w in DEFENCES[d].words if DEFENCES[d].verdict == cheat.expect]
        assert any(w in result.message for w in words), f"{cheat.name}: the message names no defence ({words}): {result.message[:400]}"


@pytest.mark.skipif(not os.environ.get("FSR_TEST_CHEATS_TODAY"), reason="set FSR_TEST_CHEATS_TODAY=1: checks the corpus against the undefended evaluator")
@pytest.mark.parametrize("cheat,twin", CHEATS, ids=[c.name for c, _ in CHEATS])
def test_cheat_fools_the_undefended_evaluator(evaluator, cheat, twin):
    honest = twin_result(evaluator, twin)
    result = evaluate(evaluator, cheat)
    assert honest.verdict == result.verdict == Verdict.OK, f"{cheat.name}: {result.verdict} {result.message[:400]}"
    assert result.timing and honest.timing
    ratio = honest.timing.median_us / result.timing.median_us
    print(f"{cheat.name}: twin {honest.timing.median_us:.1f} us, cheat {result.timing.median_us:.1f} us, {ratio:.2f}x fake")
    assert ratio > 1.1, f"{cheat.name}: only {ratio:.2f}x"


@pytest.mark.parametrize("entry", CONFIGS, ids=[e.name for e in CONFIGS])
def test_bad_configuration_costs_only_itself(entry):
    """OK at the other values, the bad one among the trials with its verdict, well within the
    candidate's timeout."""
    assert entry.fails_at is not None
    name, value, verdict = entry.fails_at
    task = tasks.load(entry.task)
    ev = corpus_evaluator(8)
    try:
        ev.device()  # the child's start is not the candidate's time
        started = time.monotonic()
        result = ev.evaluate(candidate.parse(entry.path.read_text(), task))
        elapsed = time.monotonic() - started
    finally:
        ev.close()
    assert result.verdict == Verdict.OK, f"{entry.name}: {result.verdict} {result.message[:400]}"
    assert dict(result.tuned_defines)[name] != value
    bad = [t for t in result.trials if dict(t.values).get(name) == value and not t.cached]
    assert bad and not any(t.feasible for t in bad), result.trials
    assert any(verdict.lower() in t.reason.lower() for t in bad), [t.reason for t in bad]
    assert elapsed < CANDIDATE_TIMEOUT_S / 2, f"{entry.name}: {elapsed:.1f} s"
