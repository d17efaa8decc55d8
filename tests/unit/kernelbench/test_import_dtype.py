"""`fsr import --dtype`: a problem imported in bfloat16 (or float16) is a task whose floating
arguments are in that dtype, whose reference is the float64 forward of the rounded inputs, whose
tolerance is the dtype's default (which a kernel computing in fp8 fails), and whose comparators
run PyTorch's module in the dtype; float32 stays as it was; a bad dtype is one line. On the CPU;
needs torch."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fsr import cli, commands, dtypes, tasks
from tests.support.paths import DATA as TEST_DATA

torch = pytest.importorskip("torch")

from fsr.kernelbench import one, probe, write  # noqa: E402

DATA = TEST_DATA / "kernelbench"
MATMUL = DATA / "level1/1_Square_matrix_multiplication_.py"
NORM = DATA / "level1/40_LayerNorm.py"  # weights and biases: parameters cast too
LOSS = DATA / "level1/95_CrossEntropyLoss.py"  # int64 targets: they keep their dtype


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("bf16")
    results = {p.name: one.import_one(p, out, dtype="bfloat16") for p in (MATMUL, NORM, LOSS)}
    return out, results


def task(imported, path):
    out, results = imported
    assert results[path.name]["ok"], results[path.name]
    return tasks.load(out / write.task_name(path))


@pytest.mark.parametrize("path", [MATMUL, NORM, LOSS])
def test_floating_arguments_are_bfloat16_integers_keep_theirs_and_the_tolerance_is_bfloat16s(imported, path):
    t = task(imported, path)
    floating = [a for a in t.args if a.name != "targets"]
    assert floating and all(a.dtype == "bfloat16" for a in floating), [(a.name, a.dtype) for a in t.args]
    assert [a.dtype for a in t.args if a.name == "targets"] == (["int64"] if path is LOSS else [])
    assert (t.atol, t.rtol, t.floor) == (0.0, dtypes.HALF_RTOL, dtypes.DEFAULT_FLOOR)
    assert "Run in bfloat16 as KernelBench v0.2" in t.description
    assert len(t.test_sizes) >= 5
    table = tomllib.loads((Path(t.directory) / "task.toml").read_text())
    assert "atol" not in table and "rtol" not in table  # the dtype's default, not a number of the import's


def excess(t, ref, got):
    """The largest |got - ref| over its bound (fsr.dtypes.bounds) across the outputs."""
    return max(float(np.max(np.abs(np.asarray(got[k], np.float64) - r) / dtypes.bounds(r, tasks.tolerance(t))))
               for k, r in ref.items())


def wide(inputs):
    return {k: a.astype(np.float32) if a.dtype.name == "bfloat16" else a for k, a in inputs.items()}


@pytest.mark.parametrize("path", [MATMUL, NORM, LOSS])
def test_the_reference_is_pytorchs_float32_forward_of_the_rounded_inputs_within_the_tolerance(imported, path):
    t = task(imported, path)
    fn = tasks.functions(t)
    for size in map(dict, t.test_sizes):
        inputs = fn.make_inputs(size, np.random.default_rng(5))
        assert all(a.dtype.name == "bfloat16" for k, a in inputs.items() if k != "targets")
        ref = fn.reference({k: v.copy() for k, v in inputs.items()}, size)
        got = probe._forward32(fn._SOURCE, fn._LAYOUT, wide(inputs), size, seed=0)
        assert excess(t, ref, dict(zip(fn._LAYOUT["outputs"], got, strict=True))) <= 0.1, size


def emulate(t, size, kind):
    """A kernel that reads its inputs in `kind`, computes in float64 and stores its outputs in
    `kind`, against the reference."""
    fn = tasks.functions(t)
    inputs = fn.make_inputs(size, np.random.default_rng(6))
    ref = fn.reference({k: v.copy() for k, v in inputs.items()}, size)

    def rounded(a):
        return a.astype(np.float32).astype(kind).astype(np.float64) if a.dtype.kind == "f" or a.dtype.name == "bfloat16" else a

    got = fn.reference({k: rounded(v).astype(np.float32) if k != "targets" else v for k, v in inputs.items()}, size)
    return ref, {k: rounded(v) for k, v in got.items()}


@pytest.mark.parametrize("path", [MATMUL, NORM])
def test_a_kernel_computing_in_fp8_fails_and_one_rounding_once_to_bfloat16_passes(imported, path):
    t = task(imported, path)
    assert max(excess(t, *emulate(t, dict(s), ml_dtypes.float8_e4m3fn)) for s in t.test_sizes) > 1.0
    assert max(excess(t, *emulate(t, dict(s), ml_dtypes.bfloat16)) for s in t.test_sizes) <= 1.0


def test_the_comparators_run_the_module_in_bfloat16_on_views_of_the_tasks_weights(imported):
    t = task(imported, NORM)
    fn = tasks.functions(t)
    fn._MODULE.clear()
    size = dict(t.test_sizes[-1])
    inputs = fn.make_inputs(size, np.random.default_rng(7))
    before = {k: v.copy() for k, v in inputs.items()}
    model, activations = fn.torch_module(inputs, size)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert [a.dtype for a in activations] == [torch.bfloat16]
    assert model.get_parameter("ln.weight").data_ptr() == inputs["ln_weight"].ctypes.data  # no copy
    out = fn.torch_eager(inputs, size)
    assert out.dtype == torch.bfloat16
    ref = fn.reference(before, size)
    assert excess(t, ref, {"out": out.double().numpy()}) <= 1.0
    assert all(np.array_equal(inputs[k].view(np.uint16), v.view(np.uint16)) for k, v in before.items())


SWAMPED = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return (x + 16.0) - 16.0  # bfloat16 rounds x + 16 to 1/8, float32 to 2^-19: far below float16

n = 4096

def get_inputs():
    return [torch.rand(n)]

def get_init_inputs():
    return []
'''


def test_a_module_that_cannot_compute_in_bfloat16_is_skipped_saying_so_and_imports_in_float32(tmp_path):
    path = tmp_path / "swamped.py"
    path.write_text(SWAMPED)
    low = one.import_one(path, tmp_path / "bf16", dtype="bfloat16")
    assert not low["ok"] and "PyTorch's own bfloat16 forward fails bfloat16's tolerance" in str(low["reason"]), low
    assert one.import_one(path, tmp_path / "fp32")["ok"]


def test_float32_is_the_default_and_writes_the_same_task_as_before(tmp_path):
    plain = one.import_one(MATMUL, tmp_path / "a")
    named = one.import_one(MATMUL, tmp_path / "b", dtype="float32")
    assert plain == named and "tolerance" not in plain
    name = write.task_name(MATMUL)
    for f in ("task.toml", "reference.py"):
        assert (tmp_path / "a" / name / f).read_bytes() == (tmp_path / "b" / name / f).read_bytes()
    text = (tmp_path / "a" / name / "reference.py").read_text()
    assert "cast_" not in text and "'dtype'" not in text
    assert [a.dtype for a in tasks.load(tmp_path / "a" / name).args] == ["float32"] * 3


def test_float16_casts_to_float16(tmp_path):
    result = one.import_one(MATMUL, tmp_path, dtype="float16")
    t = tasks.load(tmp_path / write.task_name(MATMUL))
    assert result["ok"] and [a.dtype for a in t.args] == ["float16"] * 3
    inputs = tasks.functions(t).make_inputs(dict(t.test_sizes[0]), np.random.default_rng(0))
    assert {a.dtype for a in inputs.values()} == {np.dtype(np.float16)}


@pytest.mark.parametrize("text", ["float8_e4m3fn", "fp16", "float64", ""])
def test_an_unknown_dtype_is_one_line(capsys, text):
    try:
        code = cli.main(["import", str(MATMUL), "--dtype", text])
    except SystemExit as e:
        code = int(e.code or 0)
    err = capsys.readouterr().err
    assert code == commands.EXIT_USAGE and err.startswith("fsr: error:") and err.count("\n") == 1, err
    assert "--dtype" in err and "bfloat16" in err, err


def test_the_command_imports_in_bfloat16_and_says_the_tolerance(tmp_path):
    relu = DATA / "level1/19_ReLU.py"
    from tests.support.paths import ROOT as root

    code = "import sys\nfrom fsr.cli import main\nsys.exit(main(sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-P", "-c", code, "import", str(relu), "--out", str(tmp_path), "--dtype", "bfloat16"],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)}, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "imported kb1_19_relu: 6 test sizes, bfloat16, atol 0, rtol 0.01, floor 1 x mean |ref|" in out.stdout, out.stdout
    assert [a.dtype for a in tasks.load(tmp_path / "kb1_19_relu").args] == ["bfloat16", "bfloat16"]
