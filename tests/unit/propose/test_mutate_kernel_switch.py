"""The offline search measures a template switch that chooses another kernel early: gemm_bf16's
WGMMA (its wgmma kernel reaches 0.95x cuBLAS untuned, where the best mma.sync combination is about
0.5x) and gemm_bf16_gelu's, in the real search loop with a fake evaluator that times every WGMMA
kernel twice as fast as any mma.sync one. The bold starts (fsr.propose.switch_moves) turn every
switch on at island 0's first request and a random half of them at the other islands', so the
kernel switch is measured before the mma.sync kernel's switches are tuned.

Measured (10 seeds, 100 evaluations, one slot and four, 4 islands): the first WGMMA kernel is
evaluation 3 (after the two seeds) in every seed, for both tasks, and the best kernel at 100 is a
WGMMA one in every seed; with every-switch-on failing (WRONG), the first that passes is evaluation
4 to 6; without the bold starts, 3 to 17."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from fsr.config import SearchConfig
from fsr.propose.mutate import MutateProposer
from fsr.search.loop import run_campaign
from fsr.tasks import load
from fsr.testing.fakes import FakeEvaluator, FakeExecutor, ListWriter
from fsr.types import Candidate, Verdict

# the mma.sync kernel's switches: small gains and a loss, so that a search without the kernel
# switch has something to climb
FACTORS = {"SWIZZLE": 1.05, "FRAG_PREFETCH": 1.03, "BLOCK_SWIZZLE": 1.02, "FULL_TILES": 1.02, "VEC4": 1.01,
           "LAUNCH_BOUNDS": 0.97, "FAST_MATH": 1.01}


def on(cand: Candidate) -> set[str]:
    values = dict(cand.resolved_defines())
    return {t.name for t in cand.features if values.get(t.name)}


@dataclass
class KernelSwitchEvaluator(FakeEvaluator):
    """The baseline at base_us, an mma.sync template kernel twice as fast (times its switches'
    factors), a WGMMA kernel four times; with `all_on_fails`, a kernel with every switch on is
    WRONG. Every kernel compiles (the template's `#error` is for the plain arch only)."""

    all_on_fails: bool = False

    def latency_us(self, cand: Candidate, features: frozenset[str] | None = None) -> float:
        if not cand.features:
            return self.base_us
        if "WGMMA" in on(cand):
            return self.base_us / 4.0
        return self.base_us / 2.0 / math.prod(FACTORS.get(s, 1.0) for s in on(cand))

    def _verdict(self, cand: Candidate, features: frozenset[str]) -> Verdict:
        if self.all_on_fails and cand.features and len(on(cand)) == len(cand.features):
            return Verdict.WRONG
        return Verdict.OK


def first_wgmma(name: str, seed: int, slots: int, all_on_fails: bool = False) -> tuple[int | None, bool]:
    """The evaluation (1-based) of the first WGMMA kernel that passed, and whether the best of 16
    evaluations is a WGMMA kernel."""
    evaluator = KernelSwitchEvaluator(noise=0.02, all_on_fails=all_on_fails)
    writer = ListWriter()
    run_campaign([load(name)], FakeExecutor(evaluator, slots=slots), MutateProposer(),
                 SearchConfig(islands=4, max_evaluations=16, seed=seed), writer)
    rows = [(row[0], row[1]) for row in writer.rows]
    assert len(rows) == 16
    first = next((i + 1 for i, (c, ev) in enumerate(rows) if "WGMMA" in on(c) and ev.verdict == Verdict.OK), None)
    best = min(rows, key=lambda r: r[1].timing.median_us if r[1].timing else math.inf)[0]
    return first, "WGMMA" in on(best)


@pytest.mark.parametrize("name", ["gemm_bf16", "gemm_bf16_gelu"])
def test_the_search_measures_the_wgmma_kernel_among_its_first_evaluations(name):
    for slots in (1, 4):
        for seed in range(3):
            first, best = first_wgmma(name, seed, slots)
            assert first is not None and first <= 4 and best, (slots, seed, first)


def test_the_wgmma_kernel_is_measured_early_when_every_switch_on_fails():
    """Island 0's every-switch-on start fails: the other islands' random halves carry WGMMA."""
    for seed in range(3):
        first, best = first_wgmma("gemm_bf16", seed, 1, all_on_fails=True)
        assert first is not None and first <= 8 and best, (seed, first)
