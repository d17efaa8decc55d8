"""Tensor maps and clusters on a real GPU (sm_90 on): a GEMM whose tiles arrive by the tensor
memory accelerator is judged OK at every test size of gemm_bf16 (its plain launch where rows are
not 16-byte aligned), and WRONG with wrong coordinates; every buffer a launch is given gets maps
of its own; launches in clusters run, and a grid its compiled cluster does not divide is refused
in one line before the driver sees it."""

from __future__ import annotations

import numpy as np
import pytest

from fsr import candidate, tasks
from fsr.types import Verdict
from tests.support.paths import DATA

pytestmark = pytest.mark.gpu
GEMM = tasks.load("gemm_bf16")
GELU = tasks.load("gelu")
TMA = (DATA / "tma" / "gemm_bf16_tma.cu").read_text()
RIGHT_B = "load_tile(Bs, &b_tiles, n0, k0, bar);"
WRONG_B = "load_tile(Bs, &b_tiles, k0, n0, bar);"  # the coordinates swapped: (k, n) where (n, k) is meant


def aligned(size) -> bool:
    sizes = dict(size)
    return sizes["K"] % 8 == 0 and sizes["N"] % 8 == 0


@pytest.fixture
def evaluator(bench_evaluator):
    """The session's evaluator of every task (tests/gpu/conftest.py): none of these kernels
    crashes or hangs, so its child and its tasks' contents stay."""
    return bench_evaluator


def test_a_tma_gemm_is_ok_at_every_test_size(evaluator):
    result = evaluator.evaluate(candidate.parse(TMA, GEMM))
    assert result.verdict == Verdict.OK, result.message
    assert len(result.checks) == len(GEMM.test_sizes) + 1 and all(c.passed for c in result.checks)
    assert any(aligned(c.size) for c in result.checks) and not all(aligned(c.size) for c in result.checks)
    assert result.timing is not None and result.timing.median_us > 0


def test_the_same_gemm_with_wrong_coordinates_is_wrong_where_its_maps_are_used(evaluator):
    assert RIGHT_B in TMA
    result = evaluator.evaluate(candidate.parse(TMA.replace(RIGHT_B, WRONG_B), GEMM))
    assert result.verdict == Verdict.WRONG, result.message
    failed = result.checks[-1]
    assert not failed.passed and aligned(failed.size), failed  # the plain launch's sizes still pass
    assert all(c.passed for c in result.checks[:-1])


def test_every_buffer_a_launch_is_given_gets_maps_of_its_own():
    import ctypes

    import cupy as cp

    from fsr.evaluate.compile import CompileService
    from fsr.evaluate.gpu.buffers import make_buffers
    from fsr.evaluate.gpu.programs import Program, enqueue, plan, synchronize

    cand = candidate.parse(TMA, GEMM)
    compiled = CompileService().compile(cand, f"sm_{cp.cuda.Device().compute_capability}")  # "90": sm_90
    program = Program(compiled.cubin, compiled.lowered)
    sizes = {"M": 77, "N": 136, "K": 72}
    inputs = tasks.functions(GEMM).make_inputs(dict(sizes), np.random.default_rng(0))
    stream = cp.cuda.Stream(non_blocking=True)
    outputs = []
    with stream:
        for _ in range(2):
            buffers = make_buffers(GEMM, cand, sizes, inputs)
            (launch,) = plan(program, cand, GEMM, sizes, {k: g.array for k, g in buffers.all().items()})
            assert launch.name == "gemm_tma" and launch.ex is not None
            outputs.append((buffers, ctypes.string_at(launch.ex.values[0].getPtr(), 128)))  # the encoded map
            buffers.reset(cand)
            enqueue([launch], stream)
        synchronize(stream)
    (first, map_one), (second, map_two) = outputs
    assert map_one != map_two  # encoded over another address
    assert np.array_equal(first.outputs["C"].host(), second.outputs["C"].host())
    assert not np.isnan(first.outputs["C"].host().astype(np.float32)).any()


CLUSTERED = GELU.baseline_source.replace('grid = ["cdiv(n, BLOCK)"]', 'grid = [GRID]').replace(
    'args = ["x", "y", "n"]', 'args = ["x", "y", "n"]CLUSTER')
assert "GRID" in CLUSTERED and "CLUSTER" in CLUSTERED and 'extern "C" __global__ void' in CLUSTERED


def gelu(grid: str, cluster: str = "", qualifier: str = "") -> candidate.Candidate:
    text = CLUSTERED.replace("GRID", grid).replace("CLUSTER", f"\ncluster = {cluster}" if cluster else "")
    if qualifier:
        text = "#define PAIR 2\n" + text.replace('extern "C" __global__ void', f'extern "C" __global__ void {qualifier}')
    return candidate.parse(text, GELU)


def test_launches_in_clusters_run(evaluator):
    for cand in (gelu('"2 * cdiv(n, 2 * BLOCK)"', cluster='["2"]'),
                 gelu('"2 * cdiv(n, 2 * BLOCK)"', qualifier="__cluster_dims__(PAIR, 1, 1)")):
        result = evaluator.evaluate(cand)
        assert result.verdict == Verdict.OK, result.message


def test_a_grid_its_compiled_cluster_does_not_divide_is_refused_in_one_line(evaluator):
    # PAIR is the file's own macro, so the header check cannot read the cluster: the GPU child reads
    # the kernel's compiled cluster and refuses the launch before the driver sees it
    result = evaluator.evaluate(gelu('"cdiv(n, BLOCK)"', qualifier="__cluster_dims__(PAIR, 1, 1)"))
    assert result.verdict == Verdict.LAUNCH_ERROR, result.message
    assert "grid (1, 1, 1) is not a whole number of (2, 1, 1) clusters" in result.message
    assert "\n" not in result.message
