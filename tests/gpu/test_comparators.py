"""The built-in library comparators on a real GPU: each computes its task's outputs within the
task's tolerance of the float64 reference at every test size where it runs (cuDNN's attention
refuses some odd lengths, with CudnnRefused: the attention library is then left out, never another
backend timed in its name; test_the_attention_library_is_cudnn_attention_on_this_gpu holds it to the
benchmark's shape class) (bfloat16 buffers passed and returned as CuPy arrays of their bits, as fsr
holds them), and spmv_csr's builds its cuSPARSE matrix once
per input set (a new set gets its own matrix, the same set reuses it)."""

from __future__ import annotations

import numpy as np
import pytest

from fsr import dtypes, tasks

pytestmark = pytest.mark.gpu
COMPARED = ("spmv_csr", "gelu", "nbody", "softmax_bf16", "rmsnorm_bf16", "attention_bf16", "attention_bf16_causal")


def _device(inputs: dict[str, np.ndarray]) -> dict:
    import cupy as cp

    return {k: cp.asarray(np.ascontiguousarray(v).view(dtypes.device_dtype(v.dtype.name))) for k, v in inputs.items()}


@pytest.fixture
def spmv():
    """spmv_csr's reference module, loaded afresh (an empty comparator cache)."""
    task = tasks.load("spmv_csr")
    tasks.forget(task)
    yield task, tasks.functions(task)
    tasks.forget(task)


@pytest.mark.parametrize("name", COMPARED)
def test_library_matches_the_reference_at_every_test_size(name):
    task = tasks.load(name)
    module = tasks.functions(task)
    rng = np.random.default_rng(7)
    refusal = getattr(module, "CudnnRefused", ())  # cuDNN attention refuses some odd lengths: no figure there
    checked = 0
    for size in task.test_sizes:
        sizes = dict(size)
        inputs = module.make_inputs(sizes, rng)
        expected = module.reference(inputs, sizes)
        try:
            got = module.library(_device(inputs), sizes)
        except refusal:
            continue
        checked += 1
        kinds = {a.name: a.dtype for a in task.outputs}
        for out, want in expected.items():
            values = dtypes.host_view(got[out].get(), kinds[out]).astype(np.float64)
            bound = dtypes.bounds(want, tasks.tolerance(task))
            assert (np.abs(values - want) <= bound).all(), f"{name} {sizes} {out}"
    assert checked, f"{name}: the library refused every test size"


def test_spmv_library_builds_one_matrix_per_input_set(spmv, monkeypatch):
    task, module = spmv
    sizes = dict(task.test_sizes[-2])
    first, second = (_device(module.make_inputs(sizes, np.random.default_rng(seed))) for seed in (1, 2))
    builds: list[int] = []
    build = module._cupyx_matrix

    def counted(*args):
        builds.append(1)
        return build(*args)

    monkeypatch.setattr(module, "_cupyx_matrix", counted)
    y_first = module.library(first, sizes)["y"].get()
    y_second = module.library(second, sizes)["y"].get()
    assert len(builds) == 2
    assert not np.allclose(y_first, y_second)  # the second set did not get the first set's matrix
    np.testing.assert_array_equal(module.library(first, sizes)["y"].get(), y_first)
    assert len(builds) == 2  # the same arrays reused their matrix
    held = [arrays for arrays, _ in module._MATRICES.values()]
    assert any(a[2] is first["vals"] for a in held)  # the cache holds the arrays, so their ids stay theirs


def test_spmv_library_matrix_is_canonical_and_views_no_new_input(spmv):
    task, module = spmv
    sizes = dict(task.test_sizes[-1])
    inputs = _device(module.make_inputs(sizes, np.random.default_rng(3)))
    before = {k: v.get() for k, v in inputs.items()}
    module.library(inputs, sizes)
    (_, matrix), = module._MATRICES.values()
    assert matrix.has_canonical_format  # the timed product does no sort
    for k, v in inputs.items():
        np.testing.assert_array_equal(v.get(), before[k], err_msg=k)  # canonicalising copied, never wrote


@pytest.mark.parametrize("name", ("attention_bf16", "attention_bf16_causal"))
def test_the_attention_library_is_cudnn_attention_on_this_gpu(name):
    """The library the table names "cuDNN SDPA" ran as cuDNN's fused attention at a size of the
    benchmark's shape class (where cuDNN refuses, library() raises CudnnRefused and this fails
    with PyTorch's reason), and agrees with the reference there."""
    task = tasks.load(name)
    module = tasks.functions(task)
    sizes = {"bh": 4, "seq": 1024}
    inputs = module.make_inputs(sizes, np.random.default_rng(11))
    got = module.library(_device(inputs), sizes)["o"]
    want = module.reference(inputs, sizes)["o"]
    values = dtypes.host_view(got.get(), "bfloat16").astype(np.float64)
    assert (np.abs(values - want) <= dtypes.bounds(want, tasks.tolerance(task))).all()
    tasks.forget(task)
