"""Low-precision task buffers: bfloat16, float16 and fp8 in task.toml and candidate headers, the
tolerance each gets (fsr.dtypes), and what loading such a task refuses: a missing fp8 tolerance,
an rtol that lets zeros pass, an absolute atol above the op's outputs, and inputs of another dtype.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from fsr import candidate, dtypes, tasks
from fsr.dtypes import Tolerance
from tests.support.paths import ADVERSARIAL

SOFTMAX_BF16 = Path(tasks.DEFAULT_TASKS_DIR) / "softmax_bf16"


@pytest.fixture
def task_dir(tmp_path):
    """A copy of the softmax_bf16 task, to change."""
    path = tmp_path / "mytask"
    shutil.copytree(SOFTMAX_BF16, path)
    return path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def retype(task_dir: Path, dtype: str) -> None:
    """The copied task with both buffers of `dtype` (the baseline's C types do not matter to loading)
    and without its stress set (logits x64 overflow float8: a retyped task declares its own)."""
    text = (task_dir / "task.toml").read_text().replace('dtype = "bfloat16"', f'dtype = "{dtype}"')
    start = text.index("# Checked when a result is certified")
    text = text[:start] + text[text.index("[[args]]", start):]
    (task_dir / "task.toml").write_text(text)
    edit(task_dir / "reference.py", 'return {"x": x.astype(ml_dtypes.bfloat16)}', f'return {{"x": x.astype("{dtype}")}}')


def test_numpy_knows_every_dtype_name_and_the_device_holds_the_ones_cupy_lacks_as_bits():
    for name in dtypes.DTYPES:
        assert dtypes.numpy_dtype(name).name == name
    assert dtypes.device_dtype("bfloat16") == np.uint16 and dtypes.device_dtype("float8_e4m3fn") == np.uint8
    assert dtypes.device_dtype("float16") == np.float16 and dtypes.device_dtype("float32") == np.float32
    bits = np.array([1.5, -2.0], dtype="bfloat16").view(np.uint16)
    assert dtypes.host_view(bits, "bfloat16").astype(float).tolist() == [1.5, -2.0]
    values = np.array([1.5, -2.0], np.float32)  # a library's float32 result: left as it is
    assert dtypes.host_view(values, "bfloat16") is values


def test_default_tolerances_by_output_dtype():
    assert dtypes.default_tolerance(["bfloat16"]) == Tolerance(0.0, 1e-2, 1.0)
    assert dtypes.default_tolerance(["float16", "bfloat16"]) == Tolerance(0.0, 1e-2, 1.0)
    for none in (["float32"], ["int32"], ["float8_e4m3fn"], ["bfloat16", "float8_e5m2"], []):
        assert dtypes.default_tolerance(none) is None, none


def test_bounds_keep_the_float32_rule_without_a_floor_and_lift_small_elements_with_one():
    ref = np.array([0.0, 1e-3, 2.0, -4.0])
    assert np.array_equal(dtypes.bounds(ref, Tolerance(1e-6, 1e-4)), 1e-6 + 1e-4 * np.abs(ref))
    floored = dtypes.bounds(ref, Tolerance(0.0, 1e-2, 1.0))  # mean |ref| = 1.50025
    assert np.allclose(floored, 1e-2 * np.maximum(np.abs(ref), 1.50025))
    assert not (np.abs(ref) <= floored).all()  # zeros fail


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_half_precision_task_loads_with_the_default_tolerance(task_dir, dtype):
    retype(task_dir, dtype)
    task = tasks.load(task_dir)
    assert task.dtype == dtype and (task.atol, task.rtol, task.floor) == (0.0, 1e-2, 1.0)


def test_an_fp8_task_must_give_rtol_and_then_loads(task_dir):
    retype(task_dir, "float8_e4m3fn")
    with pytest.raises(tasks.TaskError, match="float8_e4m3fn have no default tolerance: give rtol"):
        tasks.load(task_dir)
    edit(task_dir / "task.toml", "test_sizes = [", "rtol = 0.07\ntest_sizes = [")
    task = tasks.load(task_dir)
    assert (task.atol, task.rtol, task.floor) == (0.0, 0.07, dtypes.DEFAULT_FLOOR)


def test_a_stress_set_that_overflows_a_retyped_input_is_refused_when_the_task_loads(task_dir):
    text = (task_dir / "task.toml").read_text().replace('dtype = "bfloat16"', 'dtype = "float8_e4m3fn"')
    (task_dir / "task.toml").write_text(text.replace("test_sizes = [", "rtol = 0.07\ntest_sizes = [", 1))
    edit(task_dir / "reference.py", 'return {"x": x.astype(ml_dtypes.bfloat16)}', 'return {"x": x.astype("float8_e4m3fn")}')
    with pytest.raises(tasks.TaskError, match="stress set 'logits x64' makes input x non-finite"):
        tasks.load(task_dir)


def test_a_float32_task_still_needs_its_own_atol(tmp_path):
    path = tmp_path / "f32"
    shutil.copytree(Path(tasks.DEFAULT_TASKS_DIR) / "softmax", path)
    edit(path / "task.toml", "atol = 1e-7\n", "")
    with pytest.raises(tasks.TaskError, match="missing key 'atol'"):
        tasks.load(path)


@pytest.mark.parametrize(("line", "said"), [
    ("rtol = 1.0", "rtol 1 must be below 1: an output of zeros would pass"),
    ("atol = 5.0", re.escape("an output y of zeros passes the tolerance (atol 5")),
    ("floor = -1", "floor must be a number >= 0"),
])
def test_a_bf16_tolerance_that_zeros_would_pass_is_refused(task_dir, line, said):
    edit(task_dir / "task.toml", "test_sizes = [", f"{line}\ntest_sizes = [")
    with pytest.raises(tasks.TaskError, match=said):
        tasks.load(task_dir)


def test_an_explicit_bf16_tolerance_replaces_the_default(task_dir):
    edit(task_dir / "task.toml", "test_sizes = [", "rtol = 0.02\nfloor = 0.5\ntest_sizes = [")
    task = tasks.load(task_dir)
    assert (task.atol, task.rtol, task.floor) == (0.0, 0.02, 0.5)


def test_float32_inputs_for_a_bfloat16_buffer_are_refused(task_dir):
    edit(task_dir / "reference.py", 'return {"x": x.astype(ml_dtypes.bfloat16)}', 'return {"x": x}')
    with pytest.raises(tasks.TaskError, match=re.escape("has dtype float32, task.toml says bfloat16")):
        tasks.load(task_dir)


def test_an_unknown_dtype_is_refused(task_dir):
    edit(task_dir / "task.toml", 'dtype = "bfloat16"', 'dtype = "bfloat8"')
    with pytest.raises(tasks.TaskError, match="dtype 'bfloat8' is not one of"):
        tasks.load(task_dir)


def test_scratch_may_be_any_low_precision_dtype_and_no_other_name():
    task = tasks.load("softmax_bf16")
    base = task.baseline_source.replace("[[launch]]", '[[scratch]]\nname = "part"\ndtype = "DT"\ncount = "rows"\n\n[[launch]]', 1)
    for name in dtypes.LOW_PRECISION:
        assert candidate.parse(base.replace("DT", name), task).scratch[0].dtype == name
    with pytest.raises(candidate.HeaderError, match="unknown dtype 'bf16'"):
        candidate.parse(base.replace("DT", "bf16"), task)


def test_the_host_check_of_a_bfloat16_output_passes_rounding_and_fails_zeros_and_poison():
    from fsr.evaluate.gpu.buffers import POISON
    from fsr.evaluate.gpu.verify import compare, expect

    ref = np.random.default_rng(0).standard_normal((64, 33)) * 1e-3  # small outputs: zeros are close in absolute terms
    want = expect(ref, "bfloat16", Tolerance(0.0, 1e-2, 1.0))
    assert want.value.dtype == np.float32 and want.bound.dtype == np.float32
    assert compare("y", ref.astype("bfloat16"), want)[0]
    ok, _, detail = compare("y", np.zeros_like(ref).astype("bfloat16"), want)
    assert not ok and "elements wrong" in detail
    poisoned = ref.astype("bfloat16")
    poisoned.view(np.uint16)[2, 3] = POISON * 0x101  # the poison's bytes: NaN in bfloat16
    ok, _, detail = compare("y", poisoned, want)
    assert not ok and "1 never written" in detail and "y[2, 3]" in detail
    fp8 = ref.astype("float8_e4m3fn")  # a kernel that stored in fp8 (subnormal at this scale)
    assert not compare("y", fp8, want)[0]


LOW_PRECISION_CORPUS = sorted(p for task in ("softmax_bf16", "rmsnorm_bf16")
                              for p in (ADVERSARIAL / task).glob("*.cu"))


@pytest.mark.parametrize("path", LOW_PRECISION_CORPUS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_bf16_corpus_passes_the_static_stage_and_compiles_with_cuda_bf16_and_fp8_headers(path, compiler):
    """Each of them is judged only on the GPU (tests/gpu/test_evaluator.py: WRONG): here, that the
    headers they include are allowed and found on NVRTC's include path."""
    from fsr.evaluate.static import static_stage

    task = tasks.load(path.parent.name)
    result = static_stage(candidate.parse(path.read_text(), task), task, "sm_90", compiler)
    assert result.verdict is None, result.verdict and result.verdict.message[:600]
    assert result.compiled is not None and result.compiled.cubin


@pytest.mark.parametrize("dtype", dtypes.LOW_PRECISION)
def test_a_kernel_taking_each_low_precision_c_type_compiles(dtype, compiler):
    from fsr.evaluate.static import static_stage

    task = tasks.load("softmax_bf16")
    c_type, header = dtypes.C_TYPES[dtype], dtypes.HEADERS[dtype]
    source = task.baseline_source.split("*/")[0] + f"""*/
#include <{header}>
extern "C" __global__ void softmax_bf16_baseline(const {c_type}* x, {c_type}* y, int rows, int cols) {{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows) y[i] = {c_type}(float(x[i]) * 2.0f);
}}
"""
    result = static_stage(candidate.parse(source, task), task, "sm_90", compiler)
    assert result.verdict is None, result.verdict and result.verdict.message[:600]
