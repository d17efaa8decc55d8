"""Stress sets a task declares (task.toml `[[stress]]`, docs/judge.md "Stress sets"): how they are
read, what a bad one says, and the inputs certification draws for them. On the GPU:
tests/gpu/test_stress.py."""

import shutil
from pathlib import Path

import numpy as np
import pytest

from fsr import dtypes, tasks

SOFTMAX = Path(tasks.DEFAULT_TASKS_DIR) / "softmax"
SET = '\n[[stress]]\nname = "logits x64"\nscale = 64.0\n'


@pytest.fixture
def task_dir(tmp_path):
    path = tmp_path / "mytask"
    shutil.copytree(SOFTMAX, path)
    text = (path / "task.toml").read_text()
    start = text.index("\n[[stress]]")
    (path / "task.toml").write_text(text[:start] + text[text.index("\n[[args]]"):])  # softmax without its set
    return path


def declare(path: Path, block: str) -> tasks.Task:
    text = (path / "task.toml").read_text()
    at = text.index("\n[[args]]")
    (path / "task.toml").write_text(text[:at] + block + text[at:])
    return tasks.load(path)


def test_a_set_defaults_to_every_floating_input_the_largest_test_size_and_the_tasks_tolerance(task_dir):
    task = declare(task_dir, SET)
    [stress] = task.stress
    assert stress.args == ("x",) and stress.scale == 64.0 and stress.offset == 0.0
    assert stress.size == max(task.test_sizes, key=lambda s: np.prod([v for _, v in s]))
    assert (stress.atol, stress.rtol, stress.floor) == (task.atol, task.rtol, task.floor)


def test_a_declared_set_changes_the_content_hash(task_dir):
    plain = tasks.load(task_dir).content_hash
    assert declare(task_dir, SET).content_hash != plain


@pytest.mark.parametrize(("block", "said"), [
    (SET.replace("scale = 64.0", "scale = 0.0"), "scale and offset must be finite"),
    (SET.replace("scale = 64.0", "scale = 1.0"), "change the inputs"),
    (SET + 'args = ["y"]\n', r"args must name floating-point inputs \(x\), not \['y'\]"),
    (SET + "rtol = 1.5\n", r"rtol must be in \[0, 1\)"),
    (SET + "size = { rows = 3 }\n", "must give exactly"),
    (SET + SET, "stress sets need distinct names"),
    (SET.replace("scale = 64.0", "scale = 1e38") + "size = { rows = 17, cols = 1000 }\n", "makes input x non-finite"),
], ids=["scale0", "unchanged", "output", "rtol", "size", "twice", "overflow"])
def test_a_bad_set_is_a_task_error_naming_it(task_dir, block, said):
    with pytest.raises(tasks.TaskError, match=said):
        declare(task_dir, block)


def test_the_mapped_inputs_are_the_drawn_ones_scaled_and_offset_in_their_dtype():
    task = tasks.load("layernorm")
    [stress] = task.stress
    module = tasks.functions(task)
    plain = module.make_inputs(dict(stress.size), np.random.default_rng(5))
    mapped = tasks.stress_inputs(task, module, stress, np.random.default_rng(5))
    assert stress.args == ("x",)
    np.testing.assert_array_equal(mapped["x"], (plain["x"].astype(np.float64) + 1000.0).astype(np.float32))
    np.testing.assert_array_equal(mapped["weight"], plain["weight"])


@pytest.mark.parametrize("name", ["softmax", "softmax_bf16", "cross_entropy"])
def test_large_logits_overflow_a_softmax_without_the_row_maximum_and_not_an_honest_one(name):
    """On the host, in float32: the set is what tells the two apart (fsr's usual inputs do not)."""
    task = tasks.load(name)
    [stress] = task.stress
    module = tasks.functions(task)
    logits = next(a for a in stress.args)
    for scale, overflows in ((1.0, False), (stress.scale, True)):
        x = module.make_inputs(dict(stress.size), np.random.default_rng(7))[logits].astype(np.float32) * np.float32(scale)
        with np.errstate(over="ignore"):
            assert (not np.isfinite(np.exp(x)).all()) == overflows
        assert np.isfinite(np.exp(x - x.max(axis=1, keepdims=True))).all()


def test_an_honest_two_pass_layernorm_passes_the_offset_set_and_a_one_pass_variance_does_not():
    task = tasks.load("layernorm")
    [stress] = task.stress
    module = tasks.functions(task)
    inputs = tasks.stress_inputs(task, module, stress, np.random.default_rng(9))
    ref = module.reference({k: v.copy() for k, v in inputs.items()}, dict(stress.size))["y"]
    bound = dtypes.bounds(ref, dtypes.Tolerance(stress.atol, stress.rtol, stress.floor))
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    eps = np.float32(dict(task.constants)["eps"])
    mean = x.sum(axis=1, dtype=np.float32, keepdims=True) / np.float32(x.shape[1])
    two = ((x - mean) ** 2).sum(axis=1, dtype=np.float32, keepdims=True) / np.float32(x.shape[1])
    one = np.maximum((x * x).sum(axis=1, dtype=np.float32, keepdims=True) / np.float32(x.shape[1]) - mean * mean, 0)
    for var, passes in ((two, True), (one, False)):
        y = (x - mean) / np.sqrt(var + eps) * w + b
        assert bool((np.abs(y - ref) <= bound).all()) == passes


def test_the_built_in_sets_are_at_test_sizes_or_below():
    """Certification checks each at one size: no larger than the task's test sizes, so it costs a
    check at a test size, not a benchmark."""
    stressed = [name for name in tasks.list_tasks() if tasks.load(name).stress]
    assert {"softmax", "softmax_bf16", "cross_entropy", "layernorm", "rmsnorm", "rmsnorm_bf16"} <= set(stressed)
    for name in stressed:
        task = tasks.load(name)
        for stress in task.stress:
            assert tasks.input_elements(task, dict(stress.size)) <= max(
                tasks.input_elements(task, dict(s)) for s in task.test_sizes), (name, stress.name)


def test_certification_checks_a_set_on_its_mapped_inputs_within_its_own_tolerance():
    """fsr.evaluate.gpu.inputs.stress_content: what certification checks a stress set against,
    built as a test size's content is, but from the set's inputs and tolerance."""
    pytest.importorskip("cupy")
    from fsr.evaluate.gpu.inputs import make_content, stress_content

    task = tasks.load("layernorm")
    [stress] = task.stress
    module = tasks.functions(task)
    inputs, expected = stress_content(task, stress, np.random.default_rng(3))
    mapped = tasks.stress_inputs(task, module, stress, np.random.default_rng(3))
    assert set(inputs) == set(mapped) and all(np.array_equal(inputs[k], mapped[k]) for k in mapped)
    ref = module.reference({k: v.copy() for k, v in mapped.items()}, dict(stress.size))["y"]
    own = dtypes.bounds(ref, dtypes.Tolerance(stress.atol, stress.rtol, stress.floor))
    np.testing.assert_array_equal(expected["y"].bound, own.astype(expected["y"].bound.dtype))
    plain_inputs, plain = make_content(task, module, {"y": "float32"}, dict(stress.size), np.random.default_rng(3))
    assert (plain["y"].bound < expected["y"].bound).all(), "the set's tolerance is wider than the task's"
    assert not np.array_equal(plain_inputs["x"], inputs["x"])


@pytest.mark.parametrize("name", ["rmsnorm", "rmsnorm_bf16"])
def test_an_rms_norm_that_drops_eps_is_right_on_usual_rows_and_wrong_on_the_scaled_set(name):
    """On the host, in float32 as the kernels compute (bfloat16 outputs rounded once): an honest
    norm passes both fsr's usual inputs and the set; one without eps in long rows (the corpus's
    certify/rmsnorm/no_eps.cu) passes the usual inputs and fails the set."""
    import ml_dtypes

    task = tasks.load(name)
    [stress] = task.stress
    module = tasks.functions(task)
    eps = np.float32(dict(task.constants)["eps"])
    size = dict(stress.size)
    usual = module.make_inputs(size, np.random.default_rng(11))
    scaled = tasks.stress_inputs(task, module, stress, np.random.default_rng(11))
    out = next(a for a in task.outputs).dtype
    for inputs, tolerance, drops_fail in ((usual, tasks.tolerance(task), False),
                                          (scaled, dtypes.Tolerance(stress.atol, stress.rtol, stress.floor), True)):
        ref = module.reference({k: v.copy() for k, v in inputs.items()}, size)["y"]
        bound = dtypes.bounds(ref, tolerance)
        x, w = inputs["x"].astype(np.float32), inputs["weight"].astype(np.float32)
        ms = (x * x).sum(axis=1, dtype=np.float32, keepdims=True) / np.float32(x.shape[1])
        for kept, passes in ((eps, True), (np.float32(0.0), not drops_fail)):
            y = x * (np.float32(1.0) / np.sqrt(ms + kept)) * w
            if out == "bfloat16":
                y = y.astype(ml_dtypes.bfloat16).astype(np.float32)
            assert bool((np.abs(y.astype(np.float64) - ref) <= bound).all()) == passes, (name, stress.name, kept)
