"""The AI-workload tasks on a real GPU: the switch combinations a strong hand-written kernel uses
(fused single pass, float4 loads, warp-shuffle reductions, shared-memory tiles, online softmax)
are correct at every test size and faster than the task's plain baseline."""

from __future__ import annotations

import pytest

from fsr import candidate, tasks
from fsr.types import Verdict
from tests.support.gpu_evaluators import precompile

STRONG: dict[str, list[dict[str, int]]] = {
    "gelu": [dict(VEC4=1, REG_BLOCK=1, FAST_MATH=1, READONLY=1, LAUNCH_BOUNDS=1),
             dict(VEC4=1, REG_BLOCK=1, COALESCE=1, FAST_MATH=1, READONLY=1, STREAMING=1)],
    "rmsnorm": [dict(WARP_SHUFFLE=1, VEC4=1, SMEM_TILE=1, FAST_MATH=1, READONLY=1, UNROLL=1),
                dict(WARP_ROW=1, WARP_SHUFFLE=1, VEC4=1, FAST_MATH=1, READONLY=1, UNROLL=1)],
    "cross_entropy": [dict(WARP_SHUFFLE=1, VEC4=1, ONLINE=1, FAST_MATH=1, READONLY=1, UNROLL=1),
                      dict(WARP_SHUFFLE=1, VEC4=1, ONLINE=1, FAST_MATH=1, READONLY=1, BLOCK=1024)],
    "transpose": [dict(SMEM_TILE=1, BANK_PAD=1, VEC4=1, READONLY=1, UNROLL=1, LAUNCH_BOUNDS=1),
                  dict(SMEM_TILE=1, BANK_PAD=1, VEC4=1, READONLY=1, UNROLL=1, STREAMING=1, TILE=64, BY=16)],
    "gemv": [dict(WARP_ROW=1, WARP_SHUFFLE=1, VEC4=1, READONLY=1, UNROLL=1),
             dict(WARP_ROW=1, WARP_SHUFFLE=1, VEC4=1, READONLY=1, UNROLL=1, REG_BLOCK=1)],
    "sum_middle": [dict(SMEM_TILE=1, VEC4=1, GRID_SPLIT=1, UNROLL=1, READONLY=1),
                   dict(VEC4=1, GRID_SPLIT=1, UNROLL=1, STREAMING=1, SPLIT=32)],
    "attention": [dict(SMEM_TILE=1, VEC4=1, ONLINE=1, FAST_MATH=1, READONLY=1, LAUNCH_BOUNDS=1),
                  dict(SMEM_TILE=1, VEC4=1, ONLINE=1, FAST_MATH=1, READONLY=1, WARP_SHUFFLE=1, BK=64)],
}
CASES = [(name, combo) for name, combos in STRONG.items() for combo in combos]


@pytest.fixture(scope="module")
def evaluator(bench_evaluator):
    """The session's evaluator of every task at the benchmark size (torch.compile off: the speedups
    here are over the task's baseline), the strong combinations compiled ahead."""
    precompile(bench_evaluator, [candidate.with_defines(candidate.parse(tasks.load(name).template_source or "",
                                                                         tasks.load(name)), combo)
                                 for name, combo in CASES])
    return bench_evaluator


def test_strong_combinations_name_switches_and_tunables_of_their_templates():
    for name, combo in CASES:
        task = tasks.load(name)
        cand = candidate.parse(task.template_source, task)
        assert set(combo) <= {t.name for t in cand.tunables + cand.features}, name


@pytest.mark.gpu
@pytest.mark.parametrize("name,combo", CASES, ids=[f"{n}-{'-'.join(c)}" for n, c in CASES])
def test_strong_combination_is_correct_and_beats_the_baseline(evaluator, name, combo):
    task = tasks.load(name)
    cand = candidate.with_defines(candidate.parse(task.template_source, task), combo)
    result = evaluator.evaluate(cand, tune=False)
    assert result.verdict == Verdict.OK, f"{name} {combo}: {result.message[:400]}"
    assert result.speedup is not None and result.speedup > 1.0, f"{name} {combo}: {result.speedup}"
