"""Certification's stricter starting state on a real GPU: each cheat of tests/adversarial/certify/
keeps something from one launch for the next in a place screening leaves alone (a `__constant__`
bank, shared or local memory left by an earlier block, the slack past a buffer's end canary or the
tail of a large buffer's last page, L2 lines under an evict_last policy), or drops a step that
only a stress set needs. Its honest twin certifies; the cheat either fails certification, with a failed check
and a message naming the defence, or is certified no faster than its twin beyond 3% (a defence
that restores makes it honest; one screened faster than it certifies fails on timing).

Small benchmark sizes (softmax and layernorm at 256 x 16384; gelu at 2^20, whose x of 4 MiB fits
in the L2 three sets over; histogram at 2^22 into 256 bins), one evaluator for the module."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from fsr import candidate, certification, tasks
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.types import Evaluation, Verdict, WorkerSpec
from tests.adversarial.corpus import DEFENCES, Entry, certification_channels
from tests.support.certifying import certified
from tests.support.xdist_gpus import shared_budget

pytestmark = pytest.mark.gpu

PAIRS = certification_channels()
BENCH = {"softmax": (("rows", 256), ("cols", 16384)),  # small: a few seconds a certification
         "gelu": (("n", 1 << 20),),
         "histogram": (("n", 1 << 22), ("bins", 256)),  # a scratch of n + 1 ints: 16 MiB, pages of its own
         "layernorm": (("rows", 256), ("cols", 16384)),
         "rmsnorm": (("rows", 256), ("cols", 16384))}
CONFIG = Config(eval=EvalConfig(torch_compile="off", prepared_max_bytes=shared_budget()), tune=TuneConfig(trials=0))
NOT_FASTER = certification.SLOWER  # a cheat made honest is certified at most 3% faster than its twin
# Rounds of the pair's certification, the twin's then the cheat's: a few-microsecond kernel on a GPU
# other workers share can read 3% slower once; a cheat that gains is faster in every round.
ROUNDS = 3


def task_of(name: str) -> tasks.Task:
    task = tasks.load(name)
    return replace(task, bench_size=BENCH[name]) if name in BENCH else task


@pytest.fixture(scope="module")
def evaluator() -> Iterator[GpuEvaluator]:
    ev = GpuEvaluator(WorkerSpec.of(CONFIG, [task_of(n) for n in sorted({c.task for c, _ in PAIRS})]))
    yield ev
    ev.close()


_judged: dict[str, tuple[Evaluation, Evaluation]] = {}


def screened_and_certified(ev: GpuEvaluator, entry: Entry) -> tuple[Evaluation, Evaluation]:
    """The entry screened (OK: screening leaves the channel open), then certified."""
    if entry.name not in _judged:
        cand = candidate.parse(entry.path.read_text(), task_of(entry.task))
        screened = ev.evaluate(cand)
        assert screened.verdict == Verdict.OK and screened.timing is not None, f"{entry.name}: {screened.message[:400]}"
        _judged[entry.name] = screened, certified(ev, certification.request(cand, screened), screened)
    return _judged[entry.name]


def certified_us(ev: GpuEvaluator, entry: Entry) -> float:
    """The entry certified once more (its screening judged before), for a pair's next round."""
    screened, _ = screened_and_certified(ev, entry)
    got = ev.evaluate(certification.request(candidate.parse(entry.path.read_text(), task_of(entry.task)), screened))
    assert got.verdict == Verdict.OK and got.timing is not None, f"{entry.name}: {got.message[:400]}"
    return got.timing.median_us


@pytest.mark.parametrize("cheat,twin", PAIRS, ids=[t.name for _, t in PAIRS])
def test_the_honest_twin_certifies(evaluator, cheat, twin):
    _, got = screened_and_certified(evaluator, twin)
    assert got.verdict == Verdict.OK and got.certified is True, f"{twin.name}: {got.verdict} {got.message[:400]}"


@pytest.mark.parametrize("cheat,twin", PAIRS, ids=[c.name for c, _ in PAIRS])
def test_the_cheat_is_not_certified_faster_than_its_twin(evaluator, cheat, twin):
    twin_screened, honest = screened_and_certified(evaluator, twin)
    screened, got = screened_and_certified(evaluator, cheat)
    assert honest.verdict == Verdict.OK and honest.timing is not None, honest.message
    defence = DEFENCES[cheat.caught_by[0]]
    assert screened.timing is not None and twin_screened.timing is not None
    print(f"{cheat.name}: screened {screened.timing.median_us:.1f} us (twin {twin_screened.timing.median_us:.1f} us),"
          f" twin certified {honest.timing.median_us:.1f} us,"
          f" cheat {got.verdict} {got.failed_check} {got.timing.median_us if got.timing else float('nan'):.1f} us")
    if defence.verdict == "OK":  # made honest: certified at its twin's speed, or fails on timing
        if got.verdict == Verdict.UNCERTIFIED:
            assert got.failed_check == certification.TIMING, f"{cheat.name}: {got.failed_check}: {got.message[:400]}"
            return
        assert got.verdict == Verdict.OK and got.timing is not None, f"{cheat.name}: {got.message[:400]}"
        ratios = [honest.timing.median_us / got.timing.median_us]
        while ratios[-1] > NOT_FASTER and len(ratios) < ROUNDS:  # noise of other work on the GPU, or a gain
            ratios.append(certified_us(evaluator, twin) / certified_us(evaluator, cheat))
        assert min(ratios) <= NOT_FASTER, f"{cheat.name}: certified {', '.join(f'{r:.3f}x' for r in ratios)} its twin's speed"
        return
    assert got.verdict == Verdict.UNCERTIFIED and got.certified is False, f"{cheat.name}: {got.verdict} {got.message[:400]}"
    text = f"{got.failed_check} {got.message}"
    assert any(w in text for w in defence.words), f"{cheat.name}: nothing names {cheat.caught_by[0]}: {text[:400]}"
