"""`fsr import` on KernelBench files kept in tests/data/kernelbench (MIT, with their licence):
the task folders it writes load, their sizes, shapes, test sizes and tolerances are right, and a
file that cannot be imported gets one line saying why. On the CPU; needs torch."""

from __future__ import annotations

import ast
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fsr import expr, tasks
from tests.support.paths import DATA as TEST_DATA

torch = pytest.importorskip("torch")

from fsr.kernelbench import one, write  # noqa: E402  (after the torch check)

DATA = TEST_DATA / "kernelbench"
FILES = {
    "matmul": "level1/1_Square_matrix_multiplication_.py",
    "activation": "level1/19_ReLU.py",
    "norm": "level1/40_LayerNorm.py",
    "reduction": "level1/47_Sum_reduction_over_a_dimension.py",
    "conv": "level1/63_conv_standard_2D__square_input__square_kernel.py",
    "pooling": "level1/42_Max_Pooling_2D.py",
    "loss": "level1/95_CrossEntropyLoss.py",
    "fusion": "level2/1_Conv2D_ReLU_BiasAdd.py",
    "block": "level3/8_ResNetBasicBlock.py",
    "concat": "level3/17_SqueezeNetFireModule.py",
}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("tasks")
    results = {kind: one.import_one(DATA / f, out) for kind, f in FILES.items()}
    return out, results


def task(imported, kind):
    out, results = imported
    assert results[kind]["ok"], results[kind]
    return tasks.load(out / write.task_name(DATA / FILES[kind]))


@pytest.mark.parametrize("kind", FILES)
def test_every_kind_becomes_a_task_without_baseline(imported, kind):
    t = task(imported, kind)
    folder = Path(t.directory)
    assert sorted(p.name for p in folder.iterdir() if p.is_file()) == ["reference.py", "task.toml"]
    assert tasks.functions(t)._SOURCE == (DATA / FILES[kind]).read_text()  # the file travels inside reference.py
    assert t.baseline_source == "" and t.template_source is None
    assert "class Model" in t.description and "Arguments" in t.description


@pytest.mark.parametrize("kind", FILES)
def test_test_sizes_are_smaller_odd_and_edge_and_every_shape_holds(imported, kind):
    t = task(imported, kind)
    fn = tasks.functions(t)
    bench = dict(t.bench_size)
    assert len(t.test_sizes) >= 5 and t.bench_size not in t.test_sizes
    assert len(set(t.test_sizes)) == len(t.test_sizes)
    assert all(v <= bench[k] for s in t.test_sizes for k, v in s)
    assert any(v % 2 for s in t.test_sizes for k, v in s if v != bench[k])  # an odd size
    for size in map(dict, t.test_sizes):
        inputs = fn.make_inputs(size, np.random.default_rng(1))
        outputs = fn.reference({k: v.copy() for k, v in inputs.items()}, size)
        for arg in t.args:
            got = (inputs if arg.intent == "in" else outputs)[arg.name]
            assert got.shape == tasks.shape_of(t, arg, size), (arg.name, size)
            if arg.intent == "in":
                assert got.dtype == np.dtype(arg.dtype)


def test_sizes_shapes_and_roofline_of_the_matmul(imported):
    t = task(imported, "matmul")
    assert t.size_names == ("N",) and dict(t.bench_size) == {"N": 4096}
    assert [(a.name, a.shape, a.intent) for a in t.args] == [("A", ("N", "N"), "in"), ("B", ("N", "N"), "in"),
                                                             ("out", ("N", "N"), "out")]
    assert expr.evaluate(t.bytes_expr, {"N": 10}) == 3 * 4 * 100
    assert expr.evaluate(t.flops_expr, {"N": 10}) == 2 * 10**3


def test_weights_are_inputs_named_after_their_module_path_and_shapes_are_expressions(imported):
    conv = task(imported, "conv")
    shapes = {a.name: a.shape for a in conv.args}
    assert shapes["conv2d_weight"] == ("out_channels", "in_channels", "kernel_size", "kernel_size")
    # a convolution's output extent is an expression of the sizes, right at the bench size too
    bench = dict(conv.bench_size)
    out = next(a for a in conv.args if a.intent == "out")
    assert [expr.evaluate_int(d, bench) for d in out.shape] == [bench["batch_size"], bench["out_channels"],
                                                                 bench["width"] - bench["kernel_size"] + 1,
                                                                 bench["height"] - bench["kernel_size"] + 1]
    norm = task(imported, "norm")
    assert {a.name for a in norm.args} >= {"ln_weight", "ln_bias"}
    loss = task(imported, "loss")
    assert [(a.name, a.dtype) for a in loss.inputs] == [("predictions", "float32"), ("targets", "int64")]
    assert next(a for a in loss.args if a.intent == "out").shape == ("1",)
    block = task(imported, "block")
    assert any(a.name.startswith("bn1_running") for a in block.args)


def test_concatenated_branches_are_a_sum_of_sizes_and_equal_sizes_the_module_takes_apart_vary_apart(imported):
    fire = task(imported, "concat")
    out = next(a for a in fire.args if a.intent == "out")
    assert out.shape == ("batch_size", "expand1x1_channels + expand3x3_channels", "height", "width")
    assert any(s["expand1x1_channels"] != s["expand3x3_channels"] for s in map(dict, fire.test_sizes))


def emulate(t, size, dtype):
    """A kernel that computes honestly in float64 but reads its inputs and stores its outputs in
    `dtype` (float16 / bfloat16), against the reference."""
    fn = tasks.functions(t)
    inputs = fn.make_inputs(size, np.random.default_rng(2))
    ref = fn.reference({k: v.copy() for k, v in inputs.items()}, size)

    def rounded(a):
        return torch.from_numpy(a).to(dtype).double().numpy() if a.dtype.kind == "f" else a

    got = fn.reference({k: rounded(v) for k, v in inputs.items()}, size)
    return ref, {k: rounded(v) for k, v in got.items()}


def worst(t, ref, got):
    """The largest |got - ref| / (atol + rtol |ref|) over the outputs."""
    return max(float(np.max(np.abs(got[k] - r) / (t.atol + t.rtol * np.abs(r)))) for k, r in ref.items())


def pytorch_float32(t, size):
    """PyTorch's own float32 forward on the task's inputs, against the reference."""
    fn = tasks.functions(t)
    inputs = fn.make_inputs(size, np.random.default_rng(3))
    ref = fn.reference({k: v.copy() for k, v in inputs.items()}, size)
    from fsr.kernelbench import probe

    got = probe._forward32(fn._SOURCE, fn._LAYOUT, inputs, size, seed=0)
    return ref, dict(zip(fn._LAYOUT["outputs"], got, strict=True))


@pytest.mark.parametrize("kind", ["matmul", "norm", "conv", "fusion", "block"])
def test_tolerance_passes_pytorch_float32_and_fails_half_precision(imported, kind):
    t = task(imported, kind)
    for size in map(dict, t.test_sizes):
        assert worst(t, *pytorch_float32(t, size)) <= 0.1, size  # float32 stays well inside
    for dtype in (torch.float16, torch.bfloat16):
        assert max(worst(t, *emulate(t, dict(s), dtype)) for s in t.test_sizes) >= 2.0, dtype


def test_integer_outputs_compare_exactly(tmp_path):
    source = (DATA / FILES["reduction"]).read_text().replace("torch.sum(x, dim=self.dim, keepdim=True)",
                                                              "torch.argmax(x, dim=self.dim)")
    path = tmp_path / "argmax.py"
    path.write_text(source)
    result = one.import_one(path, tmp_path / "tasks")
    assert result["ok"], result
    t = tasks.load(tmp_path / "tasks" / "argmax")
    assert (t.atol, t.rtol) == (0.5, 1e-12) and t.outputs[0].dtype == "int64"


HEAD = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
TAIL = "\nbatch_size = 16\ndim = 64\n\ndef get_inputs():\n    return [torch.rand(batch_size, dim)]\n\ndef get_init_inputs():\n    return []\n"
BAD = {
    "random": ("    def forward(self, x):\n        return x + torch.randn_like(x)\n", "random ops in forward"),
    "nonzero": ("    def forward(self, x):\n        return torch.nonzero(x > 0.5)\n", "data-dependent"),
    "number": ("    def forward(self, x):\n        return x.sum().item()\n", "data-dependent"),
    "string": ("    def forward(self, x):\n        return 'done'\n", "forward returns a str, not tensors"),
    "raises": ("    def forward(self, x):\n        return x @ x\n", "RuntimeError"),
    "zeros": ("    def forward(self, x):\n        return x * 0\n", "zero at every test size"),
}


@pytest.mark.parametrize("kind", BAD)
def test_a_file_that_cannot_be_imported_gets_one_line_why(tmp_path, kind):
    forward, why = BAD[kind]
    path = tmp_path / f"{kind}.py"
    path.write_text(HEAD + forward + TAIL)
    result = one.import_one(path, tmp_path / "tasks")
    assert not result["ok"] and why in str(result["reason"]) and "\n" not in str(result["reason"]), result
    assert not (tmp_path / "tasks" / kind).exists()


def test_a_broadcast_valid_only_at_the_files_sizes_is_named_as_the_cause(tmp_path):
    # KernelBench's 100_HingeLoss: (batch, n) * (batch,) broadcasts only where batch == n.
    path = tmp_path / "hinge.py"
    path.write_text(HEAD + "    def forward(self, p, t):\n        return torch.mean(torch.clamp(1 - p * t, min=0))\n"
                    "\nbatch_size = 4096\ninput_shape = (4096,)\n\ndef get_inputs():\n"
                    "    return [torch.rand(batch_size, *input_shape), torch.rand(batch_size)]\n\n"
                    "def get_init_inputs():\n    return []\n")
    result = one.import_one(path, tmp_path / "tasks")
    assert not result["ok"], result
    assert "at batch_size = 2048: RuntimeError" in str(result["reason"]), result
    assert "broadcast" in str(result["reason"]), result


def test_files_without_sizes_or_functions_are_skipped(tmp_path):
    for name, source, why in (("nosizes", HEAD + "    def forward(self, x):\n        return x\n", "no module-level integer sizes"),
                              ("nofuncs", "import torch\nN = 16\nclass Model(torch.nn.Module):\n    pass\n", "no get_inputs")):
        (tmp_path / f"{name}.py").write_text(source)
        result = one.import_one(tmp_path / f"{name}.py", tmp_path / "tasks")
        assert not result["ok"] and why in str(result["reason"]), result


def test_reference_work_per_evaluation_stays_small(imported):
    for kind in ("matmul", "conv", "fusion"):
        t = task(imported, kind)
        elements = sum(math.prod(tasks.shape_of(t, a, dict(s))) for s in t.test_sizes for a in t.args)
        assert elements < 2**23, kind


# PyTorch's own module as the comparator: torch_module / torch_eager in every imported reference.py.

WEIGHTED = ["norm", "conv", "fusion", "block"]  # kinds whose module has float weights


def smallest(t):
    return dict(min(t.test_sizes, key=lambda s: math.prod(v for _, v in s)))


def within(t, got, ref):
    """Whether float32 outputs `got` (tensors) pass the task's tolerance against `ref`."""
    return all(np.all(np.abs(g.numpy().astype(np.float64) - r) <= t.atol + t.rtol * np.abs(r))
               for g, r in zip(got, ref.values(), strict=True))


def run_module(fn, inputs, size):
    model, activations = fn.torch_module(inputs, size)
    with torch.no_grad():
        return fn.outputs(model(*activations))


@pytest.mark.parametrize("kind", FILES)
def test_torch_module_is_the_file_in_float32_with_the_tasks_weights_and_writes_no_input(imported, kind):
    t = task(imported, kind)
    fn = tasks.functions(t)
    fn._MODULE.clear()
    size = smallest(t)
    inputs = fn.make_inputs(size, np.random.default_rng(4))
    before = {k: v.copy() for k, v in inputs.items()}
    ref = fn.reference(before, size)
    got = run_module(fn, inputs, size)
    assert [g.dtype for g in got] == [torch.from_numpy(r).dtype if r.dtype.kind != "f" else torch.float32
                                      for r in ref.values()]
    assert within(t, got, ref), kind
    assert within(t, fn.outputs(fn.torch_eager(inputs, size)), ref), kind  # returned: torch.compile keeps it
    # a training-mode forward updates BatchNorm's running statistics: on copies, never the task's inputs
    assert all(np.array_equal(inputs[k], v) for k, v in before.items()), kind
    model, _ = fn.torch_module(inputs, size)
    for name, path in fn._LAYOUT["state"]:
        if path in dict(model.named_parameters()):  # parameters are views of the arrays, no copy
            assert model.get_parameter(path).data_ptr() == inputs[name].ctypes.data, path


@pytest.mark.parametrize("kind", WEIGHTED)
def test_a_module_with_other_weights_does_not_match(imported, kind):
    t = task(imported, kind)
    fn = tasks.functions(t)
    size = smallest(t)
    inputs = fn.make_inputs(size, np.random.default_rng(4))
    ref = fn.reference({k: v.copy() for k, v in inputs.items()}, size)
    weights = [n for n, _ in fn._LAYOUT["state"] if inputs[n].dtype.kind == "f"]
    assert weights, kind
    fn._MODULE.clear()
    other = {**inputs, **{n: inputs[n] * 1.5 + 0.25 for n in weights}}
    assert not within(t, run_module(fn, other, size), ref), kind
    fn._MODULE.clear()


def test_the_module_is_built_once_per_size_and_later_calls_take_only_their_activations(imported, monkeypatch):
    t = task(imported, "conv")
    fn = tasks.functions(t)
    fn._MODULE.clear()
    size = smallest(t)
    first, second = (fn.make_inputs(size, np.random.default_rng(seed)) for seed in (5, 6))
    other = dict(max(t.test_sizes, key=lambda s: math.prod(v for _, v in s)))
    third = fn.make_inputs(other, np.random.default_rng(7))
    kept = {**second, **{n: first[n] for n, _ in fn._LAYOUT["state"]}}  # the first call's weights
    with_kept, with_second = fn.reference(kept, size), fn.reference(second, size)
    loads = []  # one per construction of the module (make_inputs and reference load the file too: above)
    real = fn.load

    def counted(*args):
        loads.append(args)
        return real(*args)

    monkeypatch.setattr(fn, "load", counted)
    model, _ = fn.torch_module(first, size)
    fn.torch_eager(second, size)
    again, activations = fn.torch_module(second, size)
    assert again is model and len(loads) == 1
    assert activations[0].data_ptr() == second["x"].ctypes.data  # this call's activation, no copy
    assert within(t, run_module(fn, second, size), with_kept)
    assert not within(t, run_module(fn, second, size), with_second)
    fn.torch_module(third, other)
    assert len(loads) == 2  # another size, another module
    fn._MODULE.clear()


def test_reference_py_reads_no_file_beside_it(imported, tmp_path):
    """A campaign ships reference.py's text to workers whose disks lack the task folder."""
    t = task(imported, "fusion")
    elsewhere = replace(t, directory=str(tmp_path / "not_here"), content_hash=t.content_hash + "_moved")
    fn = tasks.functions(elsewhere)
    size = smallest(t)
    inputs = fn.make_inputs(size, np.random.default_rng(8))
    ref = fn.reference({k: v.copy() for k, v in inputs.items()}, size)
    assert within(t, run_module(fn, inputs, size), ref)
    fn._MODULE.clear()


@pytest.mark.parametrize("text", ["x = 1\n", "s = '''a'''\n", "s = r'a\\\\'  # \\", "end \\", "n = 1\r\n", ""])
def test_the_problem_text_is_written_as_a_literal_that_gives_it_back(text):
    assert ast.literal_eval(write.literal(text)) == text
    assert write.literal("import torch\n").startswith("r'''import torch")  # readable where it can be


def test_reimporting_replaces_an_imported_folder_but_no_other(tmp_path):
    relu = DATA / FILES["activation"]
    assert one.import_one(relu, tmp_path)["ok"]
    assert one.import_one(relu, tmp_path)["ok"]
    foreign = tmp_path / "mine" / write.task_name(relu)
    foreign.mkdir(parents=True)
    (foreign / "reference.py").write_text("def make_inputs(sizes, rng): ...\n")
    result = one.import_one(relu, tmp_path / "mine")
    assert not result["ok"] and "is not an imported task" in str(result["reason"])
    assert (foreign / "reference.py").read_text() == "def make_inputs(sizes, rng): ...\n"


def test_the_reference_writes_no_input(imported):
    t = task(imported, "block")  # BatchNorm in training mode counts batches in an int64 buffer
    fn = tasks.functions(t)
    size = smallest(t)
    inputs = fn.make_inputs(size, np.random.default_rng(9))
    before = {k: v.copy() for k, v in inputs.items()}
    fn.reference(inputs, size)
    assert all(np.array_equal(inputs[k], v) for k, v in before.items())


def test_inputs_drawn_while_another_tasks_reference_runs_keep_their_dtypes(imported):
    """A GPU worker draws inputs in one thread while another computes a float64 reference (which
    sets torch's process-wide default dtype): the inputs stay in the file's dtypes (they came out
    float64, and a float32 kernel read garbage), across the tasks' separate modules too."""
    import threading

    relu, matmul = task(imported, "activation"), task(imported, "matmul")
    draws, refs = tasks.functions(relu), tasks.functions(matmul)
    size = dict(max(matmul.test_sizes, key=lambda s: math.prod(v for _, v in s)))
    stop = threading.Event()

    def references() -> None:
        inputs = refs.make_inputs(size, np.random.default_rng(0))
        while not stop.is_set():
            refs.reference({k: v.copy() for k, v in inputs.items()}, size)
            draws.reference(draws.make_inputs(smallest(relu), np.random.default_rng(1)), smallest(relu))

    thread = threading.Thread(target=references)
    thread.start()
    try:
        dtypes = {str(draws.make_inputs(smallest(relu), np.random.default_rng(i))["x"].dtype) for i in range(150)}
    finally:
        stop.set()
        thread.join()
    assert dtypes == {"float32"}
