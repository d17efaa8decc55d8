"""The bf16 attention tasks' library comparator is cuDNN's fused attention, named so: SDPA is
called with only the cuDNN backend enabled (sdpa_kernel(CUDNN_ATTENTION)), PyTorch eager with the
backends PyTorch picks, and where cuDNN attention is refused the library raises: the comparator
then has no figure, and says why, rather than PyTorch's own choice of backend timed under cuDNN's
name (that is the PyTorch eager figure already). No GPU: a stand-in for SDPA records which backends were
enabled when it was called (torch's CPU build is enough; without torch the pin is skipped)."""

from __future__ import annotations

import shutil

import pytest

from fsr import tasks

NAMES = ("attention_bf16", "attention_bf16_causal")
BACKENDS = ("cudnn", "flash", "mem_efficient", "math")


@pytest.mark.parametrize("name", NAMES)
def test_the_task_names_its_library(name):
    task = tasks.load(name)
    assert task.library == "cuDNN SDPA" and task.has_library


def test_a_library_named_without_a_library_function_is_refused(tmp_path):
    shutil.copytree(tasks.DEFAULT_TASKS_DIR / "softmax", tmp_path / "softmax")
    toml = tmp_path / "softmax" / "task.toml"
    toml.write_text(toml.read_text().replace('name = "softmax"\n', 'name = "softmax"\nlibrary = "CuPy"\n', 1))
    assert tasks.load(tmp_path / "softmax").library == "CuPy"
    reference = tmp_path / "softmax" / "reference.py"
    reference.write_text(reference.read_text().replace("def library(", "def not_a_library("))
    with pytest.raises(tasks.TaskError, match=r"library = 'CuPy' names a comparator, but reference.py has no library\(\)"):
        tasks.load(tmp_path / "softmax")
    toml.write_text(toml.read_text().replace('library = "CuPy"', "library = 3"))
    with pytest.raises(tasks.TaskError, match="library must be a string"):
        tasks.load(tmp_path / "softmax")


@pytest.fixture
def sdpa(monkeypatch):
    """A stand-in for torch's SDPA: records (enabled backends, is_causal) per call; `refuse` makes
    it raise as PyTorch does when no enabled backend can run. The tasks' modules, which the tests
    load afresh and change, are forgotten afterwards."""
    torch = pytest.importorskip("torch")
    calls: list[tuple[frozenset[str], bool]] = []
    state = {"refuse": False}

    def record(q, k, v, is_causal=False, **_):
        enabled = frozenset(b for b in BACKENDS if getattr(torch.backends.cuda, f"{b}_sdp_enabled")())
        calls.append((enabled, is_causal))
        if state["refuse"] and enabled == {"cudnn"}:
            raise RuntimeError("No available kernel. Aborting execution.")
        return q

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", record)
    yield torch, calls, state
    for name in NAMES:
        tasks.forget(tasks.load(name))


def module(name: str):
    """The task's reference module, loaded afresh (no fallback remembered from another test)."""
    task = tasks.load(name)
    tasks.forget(task)
    return tasks.functions(task)


@pytest.mark.parametrize("name", NAMES)
def test_the_library_enables_cudnn_alone_and_eager_leaves_pytorch_its_choice(name, sdpa):
    torch, calls, _ = sdpa
    q = torch.zeros(1, 2, 4, 128, dtype=torch.bfloat16)
    fn = module(name)
    fn.cudnn_attention(q, q, q)
    fn.cudnn_attention(q, q, q)
    causal = name.endswith("causal")
    assert calls == [(frozenset({"cudnn"}), causal)] * 2
    assert torch.backends.cuda.flash_sdp_enabled()  # the pin is undone after each call
    calls.clear()
    fn._bf16 = lambda a: a  # torch_eager on CPU tensors: the views without CuPy
    fn.torch_eager({"q": q[0], "k": q[0], "v": q[0]}, {})
    (enabled, is_causal), = calls
    assert enabled != {"cudnn"} and "flash" in enabled and is_causal == causal  # not pinned


@pytest.mark.parametrize("name", NAMES)
def test_where_cudnn_attention_is_refused_the_library_raises_and_never_times_another_backend(name, sdpa):
    torch, calls, state = sdpa
    q = torch.zeros(1, 2, 4, 128, dtype=torch.bfloat16)
    fn = module(name)
    state["refuse"] = True
    with pytest.raises(fn.CudnnRefused, match=r"cuDNN attention refused or failed at q \(1, 2, 4, 128\) under "
                                               r"PyTorch .*No available kernel.*no other backend stands in"):
        fn.cudnn_attention(q, q, q)
    assert [enabled for enabled, _ in calls] == [frozenset({"cudnn"})]  # no call with PyTorch's own choice
    state["refuse"] = False  # a refusal is not remembered: the next call tries cuDNN again
    assert fn.cudnn_attention(q, q, q) is q and len(calls) == 2


class _State:
    """What Comparators.library_us reads of a prepared task: the task and one benchmark set."""

    def __init__(self, task, inputs):
        self.task = task
        buffers = type("Buffers", (), {"inputs": {k: type("G", (), {"array": v})() for k, v in inputs.items()}})()
        self.sets = [type("Set", (), {"buffers": buffers})()]


@pytest.fixture
def timed(monkeypatch):
    """Comparators.library_us without a GPU: the streams do nothing, and the sampler calls the
    library once and reads 7 us."""
    import contextlib

    comparators = pytest.importorskip("fsr.evaluate.gpu.comparators")
    from fsr.config import EvalConfig

    def sample(run, *args, **kwargs):
        run(0)
        return [7.0]

    monkeypatch.setattr(comparators, "synchronize", lambda stream: None)
    monkeypatch.setattr(comparators.timing, "sample", sample)
    monkeypatch.setattr(comparators, "_torch_stream", lambda stream, state: contextlib.nullcontext)
    return comparators.Comparators(EvalConfig(), contextlib.nullcontext(), None, None)


@pytest.mark.parametrize("name", NAMES)
def test_a_refused_cudnn_leaves_the_library_figure_out_with_why_and_a_working_one_is_timed(name, sdpa, timed):
    torch, calls, state = sdpa
    fn = module(name)
    fn._bf16, fn._bits = (lambda a: a), (lambda t: t)  # CPU tensors stand in for the device's bits
    q = torch.zeros(2, 4, 128, dtype=torch.bfloat16)
    prepared = _State(tasks.load(name), {"q": q, "k": q, "v": q})
    assert timed.library_us(prepared) == 7.0 and timed.missed == []  # cuDNN ran: the figure is cuDNN's
    assert {enabled for enabled, _ in calls} == {frozenset({"cudnn"})}
    state["refuse"] = True
    assert timed.library_us(prepared) is None  # no figure rather than another backend's as "cuDNN SDPA"
    (why,) = timed.missed
    assert why.startswith("library (cuDNN SDPA) not timed (CudnnRefused: cuDNN attention refused or failed at q "
                          "(1, 2, 4, 128)") and "No available kernel" in why
    assert {enabled for enabled, _ in calls} == {frozenset({"cudnn"})}  # PyTorch's own choice was never called
