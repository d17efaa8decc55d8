"""The side-channel corpus on a real GPU: every honest twin is OK; every cheat gets the verdict
its header expects once the defences it names are built, with a message naming the defence, or,
where the defence makes it honest (state-reset), is OK and no faster than its twin. And a bad
tunable value costs that configuration, not the candidate: what it adds to the same candidate
without that value is well within the candidate's timeout.

`FSR_TEST_CHEATS_TODAY=1` runs one more test, for the corpus itself: every cheat fools an
evaluator without the defences (OK, and faster than its twin), printing the fake speedups; it
fails against this evaluator by design (run it on a checkout from before the defences).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsr import candidate, tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Evaluation, Verdict, WorkerSpec
from tests.support import xdist_gpus
from tests.support.gpu_evaluators import precompile
from tests.support.xdist_gpus import host_threads, run_params, shared_budget

from .corpus import DEFENCES, Entry, bad_configurations, side_channels

pytestmark = pytest.mark.gpu
CHEATS = side_channels()
CONFIGS = bad_configurations()
NOT_FASTER = 0.9  # a cheat made honest runs at its twin's speed (its stash writes may slow it)
CANDIDATE_TIMEOUT_S = 30.0
# The tuning evaluator's: long, so that a hang left to the candidate's deadline (this, and the
# tuning budget) could not pass for one cut at its trial's deadline, however busy the host
TUNED_TIMEOUT_S = 120.0


def corpus_evaluator(contents: Path, trials: int, timeout_s: float = CANDIDATE_TIMEOUT_S) -> GpuEvaluator:
    """An evaluator for every task the corpus uses, its benchmark sets in the session's contents
    cache (a crash's new child reads them back instead of building them again)."""
    names = sorted({e.task for pair in CHEATS for e in pair} | {e.task for e in CONFIGS})
    config = Config(eval=EvalConfig(timeout_s=timeout_s, torch_compile="off", host_threads=host_threads(),
                                    prepared_max_bytes=shared_budget(),
                                    contents_cache_dir=str(contents)),
                    tune=TuneConfig(trials=trials))
    return GpuEvaluator(WorkerSpec.of(config, [tasks.load(n) for n in names]))


@pytest.fixture(scope="module")
def evaluator(request: pytest.FixtureRequest, contents_dir: Path) -> Iterator[GpuEvaluator]:
    """The cheats and twins of this worker's run of the module compiled ahead, then judged one by
    one."""
    ev = corpus_evaluator(contents_dir, 0)
    pairs = run_params(request, "cheat", "twin")
    precompile(ev, [candidate.parse(e.path.read_text(), tasks.load(e.task)) for pair in pairs for e in pair])
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def tuning_evaluator(contents_dir: Path) -> Iterator[GpuEvaluator]:
    """The bad configurations' evaluator: tuning on, one for the module (a hang in a trial replaces
    its child, which the next evaluation finds started)."""
    ev = corpus_evaluator(contents_dir, 8, TUNED_TIMEOUT_S)
    yield ev
    ev.close()


_twins: dict[str, Evaluation] = {}


def evaluate(ev: GpuEvaluator, entry: Entry) -> Evaluation:
    return ev.evaluate(candidate.parse(entry.path.read_text(), tasks.load(entry.task)))


def twin_result(ev: GpuEvaluator, twin: Entry) -> Evaluation:
    if twin.name not in _twins:
        _twins[twin.name] = evaluate(ev, twin)
    return _twins[twin.name]


def paired_ratio(ev: GpuEvaluator, twin: Entry, before: Evaluation, cheat: Evaluation) -> float:
    """How many times faster the cheat ran than its twin, the twin timed again right after the
    cheat and the faster of its two medians taken: on a GPU other tests share, a neighbour's burst
    during one of the twin's runs would otherwise pass for the cheat's gain."""
    after = evaluate(ev, twin)
    assert after.verdict == Verdict.OK and after.timing and before.timing and cheat.timing
    return min(before.timing.median_us, after.timing.median_us) / cheat.timing.median_us


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
    if result.verdict == Verdict.OK:  # made honest: timed against its twin where the GPU is its own
        if xdist_gpus.gpu_sharers() == 1:
            ratio = paired_ratio(evaluator, twin, honest, result)
            assert ratio < 1 / NOT_FASTER, f"{cheat.name}: {ratio:.2f}x its twin's speed although {cheat.caught_by[0]}"
    else:
        words = [w for d in cheat.caught_by for w in DEFENCES[d].words if DEFENCES[d].verdict == cheat.expect]
        assert any(w in result.message for w in words), f"{cheat.name}: the message names no defence ({words}): {result.message[:400]}"


MADE_HONEST = [(c, t) for c, t in CHEATS if c.expect == "OK"]


@pytest.mark.whole_machine
@pytest.mark.parametrize("cheat,twin", MADE_HONEST, ids=[c.name for c, _ in MADE_HONEST])
def test_a_cheat_made_honest_is_no_faster_than_its_twin(evaluator, cheat, twin):
    """The timing half of test_cheat_is_stopped_by_its_defence, on a GPU of its own: under
    pytest-xdist, other workers' kernels share the GPU (four a GPU under -n auto) and a neighbour
    running through both of the twin's timings passed for a 1.2x gain of sgemm/launch_count."""
    honest = twin_result(evaluator, twin)
    result = evaluate(evaluator, cheat)
    assert honest.verdict == result.verdict == Verdict.OK, f"{cheat.name}: {result.verdict} {result.message[:400]}"
    ratio = paired_ratio(evaluator, twin, honest, result)
    assert ratio < 1 / NOT_FASTER, f"{cheat.name}: {ratio:.2f}x its twin's speed although {cheat.caught_by[0]}"


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


def without_value(source: str, name: str, value: int) -> str:
    """The candidate with `value` left out of its tunable `name`'s values: the same candidate
    without the bad configuration."""
    listed = re.compile(rf"^({name}\s*=\s*\[)([^\]]*)(\])", re.MULTILINE)
    found = listed.search(source)
    assert found is not None, f"no tunable {name} in the candidate's header"
    kept = [v.strip() for v in found.group(2).split(",") if v.strip() and int(v) != value]
    assert kept and len(kept) < len(found.group(2).split(",")), f"{name} = [{found.group(2)}] without {value}"
    return source[:found.start()] + found.group(1) + ", ".join(kept) + found.group(3) + source[found.end():]


@pytest.mark.parametrize("entry", CONFIGS, ids=[e.name for e in CONFIGS])
def test_bad_configuration_costs_only_itself(tuning_evaluator, entry):
    """OK at the other values, the bad one among the trials with its verdict; and what it costs
    over the same candidate without the bad value (its trial cut at the trial's deadline, a new GPU
    child, the tuning again) well within the candidate's timeout."""
    assert entry.fails_at is not None
    name, value, verdict = entry.fails_at
    task = tasks.load(entry.task)
    source = entry.path.read_text()
    honest = candidate.parse(without_value(source, name, value), task)
    ev = tuning_evaluator
    ev.evaluate(honest)  # the child started and the task prepared: neither call below pays for them
    started = time.monotonic()
    reference = ev.evaluate(honest)
    reference_s = time.monotonic() - started
    started = time.monotonic()
    result = ev.evaluate(candidate.parse(source, task))
    elapsed = time.monotonic() - started
    assert reference.verdict == Verdict.OK, f"{entry.name} without {name}={value}: {reference.message[:400]}"
    assert result.verdict == Verdict.OK, f"{entry.name}: {result.verdict} {result.message[:400]}"
    assert dict(result.tuned_defines)[name] != value
    bad = [t for t in result.trials if dict(t.values).get(name) == value and not t.cached]
    assert bad and not any(t.feasible for t in bad), result.trials
    assert any(verdict.lower() in t.reason.lower() for t in bad), [t.reason for t in bad]
    assert elapsed - reference_s < TUNED_TIMEOUT_S / 2, \
        f"{entry.name}: {elapsed:.1f} s, {reference_s:.1f} s without {name}={value}"
