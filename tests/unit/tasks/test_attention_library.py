"""The bf16 attention tasks' library comparator is cuDNN's fused attention, named so: SDPA is
called with only the cuDNN backend enabled (sdpa_kernel(CUDNN_ATTENTION)), PyTorch eager with the
backends PyTorch picks, and where cuDNN attention is refused the library falls back to PyTorch's
choice with the reason logged once. No GPU: a stand-in for SDPA records which backends were
enabled when it was called (torch's CPU build is enough; without torch the pin is skipped)."""

from __future__ import annotations

import logging
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


def test_where_cudnn_attention_is_refused_the_library_falls_back_and_says_why_once_a_shape(sdpa, caplog):
    torch, calls, state = sdpa
    q = torch.zeros(1, 2, 4, 128, dtype=torch.bfloat16)
    other = torch.zeros(1, 2, 8, 128, dtype=torch.bfloat16)
    fn = module("attention_bf16")
    state["refuse"] = True
    with caplog.at_level(logging.WARNING):
        assert fn.cudnn_attention(q, q, q) is q
        assert fn.cudnn_attention(q, q, q) is q
        state["refuse"] = False  # another shape is tried on cuDNN afresh
        assert fn.cudnn_attention(other, other, other) is other
    assert [enabled == {"cudnn"} for enabled, _ in calls] == [True, False, False, True]  # q's tried once
    (warning,) = [r.getMessage() for r in caplog.records if "cuDNN attention unavailable" in r.getMessage()]
    assert "No available kernel" in warning and "default SDPA backend" in warning and "(1, 2, 4, 128)" in warning
