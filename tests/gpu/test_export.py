"""fsr export on a real GPU: the modules of softmax and gemm_bf16 kernels (a tiny run's best,
judged by fsr's evaluator, and the tasks' baselines and templates) match the reference on two
calls in a row through CuPy and through PyTorch; kernels that count on their scratch being
zeroed and their `__device__` variables restored are right on every call, and wrong without."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from fsr import candidate as cfmt
from fsr import cli, lineage, run_json, tasks
from fsr.commands.run import _export_best
from fsr.config import Config, EvalConfig, TuneConfig
from fsr.evaluate.evaluator import GpuEvaluator
from fsr.export.module import Provenance, module_text
from fsr.types import Verdict, WorkerSpec
from tests.support.gpu_evaluators import at_test_sizes
from tests.support.xdist_gpus import host_threads, shared_budget

pytestmark = pytest.mark.gpu
FRAMEWORKS = ["cupy", "torch"]

# One block per row, its row taken from a ticket: a module-scope counter that the judge (and the
# module) restores to 0 before every call, or a scratch word declared zeroed. Without the
# restore, a second call's tickets start past the last row and no row is written.
TICKET_BODY = r"""
extern "C" __global__ void softmax_ticket(const float* x, float* y, TICKET_PARAM int rows, int cols) {
    __shared__ unsigned int row;
    __shared__ float red[BLOCK];
    if (threadIdx.x == 0) row = atomicAdd(TICKET, 1u);
    __syncthreads();
    if (row >= (unsigned)rows) return;
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) sum += expf(xr[c] - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    sum = red[0];
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) / sum;
}
"""
GLOBAL_TICKET = """/* fsr
[tunables]
BLOCK = [256]

[[launch]]
kernel = "softmax_ticket"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
*/
__device__ unsigned int next_row;
""" + TICKET_BODY.replace("TICKET_PARAM ", "").replace("TICKET", "&next_row")
SCRATCH_TICKET = """/* fsr
[tunables]
BLOCK = [256]

[[scratch]]
name = "ticket"
dtype = "uint32"
count = "1"
zero = true

[[launch]]
kernel = "softmax_ticket"
grid = ["rows"]
block = ["BLOCK"]
args = ["x", "y", "ticket", "rows", "cols"]
*/
""" + TICKET_BODY.replace("TICKET_PARAM", "unsigned int* ticket,").replace("TICKET", "ticket")


def needs(framework: str) -> None:
    if framework == "torch":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("torch is installed without CUDA")


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def export(tmp_path: Path, task_name: str, source: str, name: str) -> ModuleType:
    task = tasks.load(task_name)
    cand = cfmt.parse(source, task)
    (tmp_path / f"{name}.py").write_text(module_text(task, cand, Provenance(name), name))
    return load(tmp_path / f"{name}.py")


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A tiny run: the softmax and gemm_bf16 templates judged by fsr's evaluator (one of this
    module's, the tasks held to their test sizes, so preparing them builds no 8192^3 reference;
    torch.compile off), with their lineage and best/ as `fsr run` leaves them."""
    run = tmp_path_factory.mktemp("runs") / "r1"
    loaded = [tasks.load(n) for n in ("softmax", "gemm_bf16")]
    config = Config(eval=EvalConfig(torch_compile="off", host_threads=host_threads(),
                                    prepared_max_bytes=shared_budget()), tune=TuneConfig(trials=0))
    ev = GpuEvaluator(WorkerSpec.of(config, [at_test_sizes(t) for t in loaded]))
    try:
        with lineage.LineageWriter(run) as writer:
            for task in loaded:
                cand = cfmt.parse(task.template_source or "", task)
                result = ev.evaluate(cand, tune=False)
                assert result.verdict == Verdict.OK, f"{task.name}: {result.message[:400]}"
                writer.append(cand, result)
    finally:
        ev.close()
    run_json.write_run_json(run, {}, {"tasks": [t.name for t in loaded]})
    _export_best(run)
    yield run


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("task_name", ["softmax", "gemm_bf16"])
def test_a_runs_best_kernel_exported_matches_the_reference_twice(judged_run, tmp_path, task_name, framework):
    needs(framework)
    out = tmp_path / f"{task_name}_best.py"
    assert cli.main(["export", str(judged_run), task_name, "--out", str(out)]) == 0
    assert load(out).check(runs=2, frameworks=(framework,), quiet=True) <= 1


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("task_name,which", [("softmax", "baseline"), ("softmax", "template"),
                                             ("gemm_bf16", "baseline"), ("gemm_bf16", "template")])
def test_baselines_and_templates_exported_match_the_reference_twice(tmp_path, task_name, which, framework):
    needs(framework)
    task = tasks.load(task_name)
    m = export(tmp_path, task_name, getattr(task, f"{which}_source"), f"{task_name}_{which}")
    assert m.check(runs=2, frameworks=(framework,), quiet=True) <= 1


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("source", [GLOBAL_TICKET, SCRATCH_TICKET], ids=["global", "scratch"])
def test_a_kernel_counting_on_restored_state_is_right_on_every_call(tmp_path, source, framework):
    needs(framework)
    m = export(tmp_path, "softmax", source, "ticket")
    assert m.check(runs=3, frameworks=(framework,), quiet=True) <= 1


def test_without_the_restore_the_second_call_is_wrong(tmp_path, monkeypatch):
    m = export(tmp_path, "softmax", GLOBAL_TICKET, "ticket_unrestored")
    monkeypatch.setattr(m.Program, "reset", lambda self, stream_ptr: None)
    with pytest.raises(AssertionError, match="call 2 of 2"):
        m.check(sizes=[{"rows": 64, "cols": 1024}], runs=2, frameworks=("cupy",), quiet=True)


def test_a_ticket_in_scratch_that_is_not_zeroed_is_wrong(tmp_path):
    m = export(tmp_path, "softmax", SCRATCH_TICKET.replace("zero = true", "zero = false"), "ticket_poisoned")
    with pytest.raises(AssertionError, match="call 1 of 2"):
        m.check(sizes=[{"rows": 64, "cols": 1024}], runs=2, frameworks=("cupy",), quiet=True)


def test_calls_take_arrays_and_tensors_and_run_on_the_callers_stream(tmp_path):
    import cupy as cp

    task = tasks.load("softmax")
    m = export(tmp_path, "softmax", task.template_source or "", "softmax_calls")
    host = tasks.functions(task).make_inputs({"rows": 300, "cols": 1000}, np.random.default_rng(0))["x"]
    want = tasks.functions(task).reference({"x": host}, {"rows": 300, "cols": 1000})["y"]
    x = cp.asarray(host)
    stream = cp.cuda.Stream(non_blocking=True)
    y = m.run(x, stream=stream)
    again = m.run(x, y=cp.full_like(y, np.nan), stream=stream)
    stream.synchronize()
    for out in (y, again):
        np.testing.assert_allclose(out.get(), want, rtol=1e-4, atol=1e-7)
    with pytest.raises(TypeError, match="x: dtype float64, expected float32"):
        m.run(x.astype(cp.float64))
    with pytest.raises(ValueError, match="x: not contiguous"):
        m.run(cp.asfortranarray(x))
    with pytest.raises(TypeError, match="x: expected a cupy array, not ndarray"):
        m.run(host)
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        return
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        yt = m.run_torch(torch.as_tensor(host, device="cuda"))
    side.synchronize()
    np.testing.assert_allclose(yt.cpu().numpy(), want, rtol=1e-4, atol=1e-7)
    gemm = tasks.load("gemm_bf16")
    g = export(tmp_path, "gemm_bf16", gemm.template_source or "", "gemm_calls")
    a = torch.rand(129, 300, device="cuda").to(torch.bfloat16)
    b = torch.rand(300, 77, device="cuda").to(torch.bfloat16)
    c = g.run_torch(a, b)
    assert c.dtype == torch.bfloat16 and c.shape == (129, 77)
    torch.testing.assert_close(c.float(), a.double().matmul(b.double()).float(), rtol=1e-2, atol=1e-2)
    cp_bits = g.run(cp.asarray(a.view(torch.int16)).view(cp.uint16), cp.asarray(b.view(torch.int16)).view(cp.uint16))
    assert cp_bits.dtype == cp.uint16 and np.array_equal(cp_bits.get().view(np.int16), c.view(torch.int16).cpu().numpy())
    with pytest.raises(ValueError, match=r"A: shape \(129, 300\), expected \(129, 301\)"):
        g.run_torch(a, b, K=301)
