"""A malformed task folder is a TaskError naming the file (and line) when it is loaded: never a
traceback, and never a WRONG verdict on every candidate."""

import re
import shutil
from pathlib import Path

import pytest

from fsr import tasks

SOFTMAX = Path(tasks.DEFAULT_TASKS_DIR) / "softmax"


@pytest.fixture
def task_dir(tmp_path):
    """A copy of the softmax task, to break."""
    path = tmp_path / "mytask"
    shutil.copytree(SOFTMAX, path)
    return path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_the_unbroken_copy_loads(task_dir):
    assert tasks.load(task_dir).name == "softmax"


def test_a_syntax_error_in_reference_names_file_and_line(task_dir):
    (task_dir / "reference.py").write_text("import numpy as np\n\ndef make_inputs(sizes, rng)\n    pass\n")
    with pytest.raises(tasks.TaskError, match=r"reference\.py:3: syntax error"):
        tasks.load(task_dir)


def test_an_import_error_in_reference_names_file_and_line(task_dir):
    (task_dir / "reference.py").write_text("import numpy as np\nimport no_such_module_fsr\n")
    with pytest.raises(tasks.TaskError, match=r"reference\.py:2: importing it raised ModuleNotFoundError"):
        tasks.load(task_dir)


def test_a_missing_function_is_named(task_dir):
    (task_dir / "reference.py").write_text("def make_inputs(sizes, rng):\n    return {}\n")
    with pytest.raises(tasks.TaskError, match=r"lacks reference\(\)"):
        tasks.load(task_dir)


@pytest.mark.parametrize(("old", "new", "said"), [
    ('x = rng.standard_normal((rows, cols), dtype=np.float32)', 'x = rng.standard_normal((rows, cols))',
     re.escape("has dtype float64, task.toml says float32")),
    ('x = rng.standard_normal((rows, cols), dtype=np.float32)',
     'x = rng.standard_normal((cols + 1, rows), dtype=np.float32)', re.escape("has shape (2, 1), task.toml says (1, 1)")),
    ('return {"x": x}', 'return {"x": x, "z": x}', re.escape("returned ['x', 'z'], task.toml declares ['x']")),
    ('return {"x": x}', 'return [x]', "returned list, not a dict"),
    ('return {"y": e / e.sum(axis=1, keepdims=True)}', 'return {"y": e.sum(axis=1)}', re.escape("has shape (1,)")),
    ('rows, cols = sizes["rows"], sizes["cols"]', 'rows, cols = sizes["rows"], sizes["columns"]',
     r"reference\.py:\d+: make_inputs\(\{'rows': 1, 'cols': 1\}\) raised KeyError"),
])
def test_functions_that_disagree_with_task_toml_are_refused_at_load(task_dir, old, new, said):
    edit(task_dir / "reference.py", old, new)
    with pytest.raises(tasks.TaskError, match=said):
        tasks.load(task_dir)


@pytest.mark.parametrize(("old", "new", "said"), [
    ('    return {"x": x}', '    return {"x": x.T.copy() if rows == 64 else x}',
     re.escape("make_inputs({'rows': 64, 'cols': 1024})['x'] has shape (1024, 64), task.toml says (64, 1024)")),
    ('    return {"x": x}', '    return {"x": x.astype(np.float64) if rows == 1000 else x}',
     re.escape("make_inputs({'rows': 1000, 'cols': 257})['x'] has dtype float64")),
    ('    return {"y": e / e.sum(axis=1, keepdims=True)}',
     '    return {"y": (e / e.sum(axis=1, keepdims=True))[:, :-1] if sizes["rows"] == 3 else e / e.sum(axis=1, keepdims=True)}',
     re.escape("reference(..., {'rows': 3, 'cols': 7})['y'] has shape (3, 6)")),
])
def test_functions_that_go_wrong_at_a_larger_test_size_are_refused_at_load(task_dir, old, new, said):
    """Not only the smallest size: a transposed or retyped array at one larger size is refused."""
    edit(task_dir / "reference.py", old, new)
    with pytest.raises(tasks.TaskError, match=said):
        tasks.load(task_dir)


def test_make_inputs_runs_at_every_size_small_enough_and_never_at_a_huge_one(task_dir):
    """Every test size and the benchmark size up to CHECK_ELEMENTS are drawn; larger ones (here
    the benchmark size, 2^26 elements) would cost seconds at every load and are not."""
    edit(task_dir / "reference.py", "def make_inputs(sizes, rng):\n",
         "def make_inputs(sizes, rng):\n    assert sizes['rows'] * sizes['cols'] <= 2**21, 'drawn too large'\n"
         "    CALLS.append(dict(sizes))\n")
    edit(task_dir / "reference.py", "import numpy as np\n", "import numpy as np\n\nCALLS = []\n")
    task = tasks.load(task_dir)
    drawn = {tuple(c.items()) for c in tasks.functions(task).CALLS}
    small = {s for s in task.test_sizes if tasks.input_elements(task, dict(s)) <= tasks.CHECK_ELEMENTS}
    assert drawn == small and len(small) == len(task.test_sizes) - 1  # all but 1024 x 8192


@pytest.mark.parametrize(("old", "new", "said"), [
    ('atol = 1e-7', 'atol = "tiny"', "atol must be a number"),
    ('name = "softmax"\n', '', "missing key 'name'"),
    ('dtype = "float32"', 'dtype = "float33"', "dtype 'float33' is not one of"),
    ('{ rows = 3, cols = 7 }', '{ rows = 3, cols = 0 }', "cols must be a positive integer"),
    ('{ rows = 3, cols = 7 }', '{ rows = 3 }', "must give exactly"),
    ('shape = ["rows", "cols"]', 'shape = ["rows", "colz"]', "unknown size"),
    ('bytes = "2 * rows * cols * 4"', 'bytes = "2 * rows *"', "cannot parse expression"),
    ('sizes = ["rows", "cols"]', 'sizes = "rows"', "sizes must be a non-empty list"),
    ('intent = "out"', 'intent = "in"', "no arg has intent 'out'"),
    ('test_sizes = [', 'test_sizes = 3\nunused = [', "test_sizes must be a list of tables"),
    ('[[args]]', '[constants]\neps = "small"\n\n[[args]]', "constant eps must be a number"),
    ('rtol = 1e-4', 'rtol = 1e-4\nrtol = 2', "task.toml"),  # a TOML error
])
def test_malformed_task_toml_is_named_with_the_reason(task_dir, old, new, said):
    edit(task_dir / "task.toml", old, new)
    with pytest.raises(tasks.TaskError, match="task.toml") as err:
        tasks.load(task_dir)
    assert said in str(err.value)


def test_a_broken_baseline_is_named_and_a_missing_one_is_allowed(task_dir):
    (task_dir / "baseline.cu").unlink()
    assert tasks.load(task_dir).baseline_source == ""  # an imported task has none
    shutil.copy(SOFTMAX / "template.cu", task_dir / "baseline.cu")
    edit(task_dir / "baseline.cu", 'args = [', 'args = ["nope", ')
    with pytest.raises(tasks.TaskError, match=r"baseline\.cu: kernel softmax_template takes 4 parameters, the launch passes 5"):
        tasks.load(task_dir)


def test_a_tasks_dir_that_does_not_exist_is_said_so(tmp_path):
    for call in (lambda: tasks.load("softmax", tmp_path / "none"), lambda: tasks.list_tasks(tmp_path / "none")):
        with pytest.raises(tasks.TaskError, match="does not exist"):
            call()


def test_a_non_utf8_task_toml_is_a_task_error(task_dir):
    (task_dir / "task.toml").write_bytes(b"name = \"\xff\"\n")
    with pytest.raises(tasks.TaskError, match="task.toml"):
        tasks.load(task_dir)
