"""`fsr import` declares a scaled stress set (every floating input, weights too, x64 or x2^-10)
only where PyTorch's own forward in the task's dtype meets the task's tolerance on the mapped
inputs; a set left out is named, with why, in the import line and task.toml. On the CPU; needs
torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fsr import dtypes, tasks
from fsr.commands import importer
from fsr.types import Stress
from tests.support.paths import DATA as TEST_DATA

torch = pytest.importorskip("torch")

from fsr.kernelbench import one, precision, write  # noqa: E402  (after the torch check)

DATA = TEST_DATA / "kernelbench"
RELU = DATA / "level1/19_ReLU.py"  # scale-equivariant and exact: both sets declared
FUSION = DATA / "level2/1_Conv2D_ReLU_BiasAdd.py"  # float32 conv: its error grows 4096x at x64
MATMUL = DATA / "level1/1_Square_matrix_multiplication_.py"  # x2^-10 shrinks outputs below its atol
EXP = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
       "        super().__init__()\n\n    def forward(self, x):\n        return torch.exp(x)\n"
       "\nbatch_size = 16\ndim = 64\n\ndef get_inputs():\n    return [torch.randn(batch_size, dim) * 2]\n\n"
       "def get_init_inputs():\n    return []\n")


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("tasks")
    return out, {p.name: one.import_one(p, out) for p in (RELU, FUSION, MATMUL)}


def task(imported, path):
    out, results = imported
    assert results[path.name]["ok"], results[path.name]
    return tasks.load(out / write.task_name(path)), results[path.name]


def line(path, result):
    return importer.result_line(path, write.task_name(path), result)


def pytorch_excess(t, stress):
    """How far PyTorch's forward (the task's own torch_eager comparator) errs on the stress set's
    inputs as certification maps them (fsr.tasks.stress_inputs), over the set's bound."""
    fn = tasks.functions(t)
    size = dict(stress.size)
    inputs = tasks.stress_inputs(t, fn, stress, np.random.default_rng(3))
    ref = fn.reference({k: v.copy() for k, v in inputs.items()}, size)
    fn._MODULE.clear()  # the comparator's model is kept per size, with the weights it was built from
    got = fn.torch_eager(inputs, size)
    got = [got] if isinstance(got, torch.Tensor) else list(got)
    tol = dtypes.Tolerance(stress.atol, stress.rtol, stress.floor)
    return max(float(np.max(np.abs(g.double().numpy().reshape(ref[n].shape) - ref[n]) / dtypes.bounds(ref[n], tol)))
               for n, g in zip(fn._LAYOUT["outputs"], got, strict=True))


def test_an_elementwise_op_declares_both_sets_that_pytorch_passes_and_they_load(imported):
    t, result = task(imported, RELU)
    assert [(s.name, s.scale, s.offset) for s in t.stress] == [("inputs x64", 64.0, 0.0), ("inputs x2^-10", 2.0**-10, 0.0)]
    largest = max(t.test_sizes, key=lambda s: tasks.input_elements(t, dict(s)))
    assert all(s.size == largest and s.args == ("x",) for s in t.stress)
    assert all((s.atol, s.rtol, s.floor) == (t.atol, t.rtol, t.floor) for s in t.stress)  # the task's own
    tasks.check_functions(t)  # the stressed inputs are drawn and stay finite at load
    assert all(pytorch_excess(t, s) <= 1 for s in t.stress)
    assert line(RELU, result).endswith("; stress sets inputs x64, inputs x2^-10")


def test_a_set_pytorchs_float32_forward_fails_is_left_out_saying_so(imported):
    t, result = task(imported, FUSION)
    assert [s.name for s in t.stress] == ["inputs x2^-10"]
    said = line(FUSION, result)
    assert "stress sets inputs x2^-10, left out inputs x64 (PyTorch's float32 forward fails the tolerance (" in said, said
    toml = (Path(t.directory) / "task.toml").read_text()
    assert "# left out: inputs x64: PyTorch's float32 forward fails the tolerance" in toml
    declared = t.stress[0]
    left_out = Stress("inputs x64", declared.size, declared.args, 64.0, 0.0, t.atol, t.rtol, t.floor)
    assert set(declared.args) == {a.name for a in t.args if a.intent == "in"}  # weights and bias too
    assert pytorch_excess(t, declared) <= 1 < pytorch_excess(t, left_out)  # on a draw of its own


def test_a_set_whose_outputs_an_output_of_zeros_passes_is_left_out(imported):
    t, result = task(imported, MATMUL)
    assert [s.name for s in t.stress] == ["inputs x64"]
    assert "left out inputs x2^-10 (an output of zeros passes the tolerance)" in line(MATMUL, result)


def test_a_bfloat16_forward_that_overflows_on_a_set_leaves_it_out(tmp_path):
    path = tmp_path / "exp.py"
    path.write_text(EXP)
    result = one.import_one(path, tmp_path / "tasks", dtype="bfloat16")
    assert result["ok"], result
    t = tasks.load(tmp_path / "tasks" / "exp")
    assert [s.name for s in t.stress] == ["inputs x2^-10"]
    assert result["stress"] == "stress sets inputs x2^-10, left out inputs x64 (PyTorch's bfloat16 forward is not finite)"


def test_scaling_an_input_past_its_dtype_is_an_overflow_not_a_set():
    assert precision.scaled(np.array([1.5, -2.0], np.float16), 64.0).tolist() == [96.0, -128.0]  # exact
    with pytest.raises(precision.Overflow):
        precision.scaled(np.array([1.0, 2000.0], np.float16), 64.0)  # past float16's 65504
