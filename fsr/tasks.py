"""Load `tasks/<name>/` into a Task record, checking it once, at load time.

A task directory holds:
  task.toml     signature, sizes, tolerances, roofline expressions (declarative)
  reference.py  make_inputs(sizes, rng), reference(inputs, sizes) in float64, optional library(...)
  baseline.cu   optional: the plain human-written kernel, in the candidate format
  template.cu   optional feature template for the offline proposer; or, in task.toml,
                `template = { task = "NAME", defines = {...} }`: another task's, with defines of
                this one's own (fsr.task_templates)

A task without baseline.cu (one that `fsr import` wrote) has `baseline_source == ""`.

A malformed task is a TaskError naming the file (and line, for reference.py) when it is loaded:
TOML errors, missing or ill-typed keys, unknown sizes in shapes, reference.py that does not
import or lacks a function, and make_inputs or reference output whose names, shapes or dtypes
disagree with task.toml (tried at every size small enough to draw at load: `check_functions`),
so that no candidate is ever judged WRONG for the task's own fault.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import math
import re
import tomllib
import traceback
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from fsr import candidate as cfmt
from fsr import dtypes, expr, task_templates
from fsr.files import InputFileError, read_input
from fsr.types import Arg, Size, Stress, Task

BUILTIN_PACKAGE = "fsr_tasks"  # the repository's tasks/ folder, installed under this name (setup.py)


def _builtin_tasks_dir() -> Path:
    """Where the built-in tasks are. A source checkout (run from it, or installed editable) uses
    its own tasks/ folder; an installed fsr (a wheel, `pip install .`) the package fsr_tasks that
    carries them. The checkout comes first: an editable install's fsr_tasks points at the
    checkout it was installed from, which need not be the one this fsr was imported from."""
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "tasks" / "__init__.py").is_file():
        return checkout / "tasks"
    spec = importlib.util.find_spec(BUILTIN_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return checkout / "tasks"  # neither: the error then names where the tasks were looked for


DEFAULT_TASKS_DIR = _builtin_tasks_dir()


class TaskError(ValueError):
    """A task that cannot be found or whose files are malformed."""


def tasks_dir(override: str | Path | None = None) -> Path:
    return Path(override) if override else DEFAULT_TASKS_DIR


def list_tasks(root: str | Path | None = None) -> list[str]:
    """Names of the tasks under `root` (each a directory with a task.toml)."""
    base = _existing_root(root)
    return sorted((p.parent.name for p in base.glob("*/task.toml")), key=natural)


def natural(name: str) -> list[Any]:
    """Sort key that orders the numbers in a name by value: kb1_2 before kb1_10."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name)]


ALL_NAMED = 20  # up to this many tasks, an unknown name's error lists them all


def _unknown(name: str, root: str | Path | None) -> str:
    """The error for a task name not found: every known name where there are few, else the
    closest few (an imported folder holds about a hundred)."""
    known = list_tasks(root)
    if len(known) <= ALL_NAMED:
        return f"unknown task {name!r} (known: {', '.join(known) or 'none'})"
    close = difflib.get_close_matches(name, known, n=4, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return f"unknown task {name!r} ({hint}fsr tasks lists all {len(known)} in {tasks_dir(root)})"


def _existing_root(root: str | Path | None) -> Path:
    base = tasks_dir(root)
    if base.exists() and not base.is_dir():
        raise TaskError(f"tasks directory {base} is not a directory")
    if not base.is_dir():
        raise TaskError(f"tasks directory {base} does not exist")
    return base


def load(name_or_path: str | Path, root: str | Path | None = None) -> Task:
    """A Task from a name under `root` or a path to a task directory; raises TaskError."""
    path = Path(name_or_path)
    if not (path / "task.toml").is_file():
        path = _existing_root(root) / str(name_or_path)
    if not (path / "task.toml").is_file():
        raise TaskError(_unknown(str(name_or_path), root))
    try:
        data = tomllib.loads(_read(path / "task.toml"))
    except tomllib.TOMLDecodeError as e:
        raise TaskError(f"{path}/task.toml: {e}") from None
    try:
        task = _task(data, path)
    except TaskError:
        raise
    except KeyError as e:
        raise TaskError(f"{path}/task.toml: missing key {e.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError, ArithmeticError) as e:  # ArithmeticError: inf in a shape
        raise TaskError(f"{path}/task.toml: {e}") from None
    task = replace(task, has_library=hasattr(functions(task), "library"))
    if task.library and not task.has_library:
        raise TaskError(f"{path}/task.toml: library = {task.library!r} names a comparator, but reference.py has no library()")
    _check_sources(task, path)
    check_functions(task)
    return task


def _task(data: dict[str, Any], path: Path) -> Task:
    size_names = tuple(_names(data["sizes"], "sizes"))
    args = tuple(_arg(a, size_names) for a in _tables(data["args"], "args"))
    if len({a.name for a in args}) != len(args) or set(size_names) & {a.name for a in args}:
        raise ValueError("args and sizes need distinct names")
    if not any(a.intent == "out" for a in args):
        raise ValueError("no arg has intent 'out': there is nothing to check")
    constants = data.get("constants", {})
    if not isinstance(constants, dict):
        raise ValueError("[constants] must be a table of name = number")
    test_sizes = tuple(_size(s, size_names) for s in _tables(data["test_sizes"], "test_sizes"))
    if not test_sizes:
        raise ValueError("test_sizes is empty")
    bench_size = _size(data["bench_size"], size_names)
    for arg in args:
        for size in test_sizes + (bench_size,):
            if min(expr.evaluate_int(d, dict(size)) for d in arg.shape) < 0:
                raise ValueError(f"arg {arg.name}: shape {list(arg.shape)} is negative at {dict(size)}")
    for key in ("bytes", "flops"):
        for size in test_sizes + (bench_size,):
            if expr.evaluate(_text(data[key], key), dict(size)) < 0:
                raise ValueError(f"{key} is negative at {dict(size)}")
    tolerance = dtypes.tolerance_of(data, [a.dtype for a in args if a.intent == "out"], _number)
    baseline = _read(path / "baseline.cu") if (path / "baseline.cu").is_file() else ""
    template = task_templates.resolve(path, data, (path.parent, DEFAULT_TASKS_DIR))
    reference = _read(path / "reference.py")
    stress = tuple(_stress(t, size_names, args, test_sizes, tolerance) for t in _tables(data.get("stress", []), "stress"))
    if len({st.name for st in stress}) != len(stress):
        raise ValueError("stress sets need distinct names")
    hashed = b"".join(p.read_bytes() for p in sorted(path.glob("*")) if p.is_file() and p.suffix in (".toml", ".py", ".cu"))
    if template is not None and template.chain:  # another task's template: its text and the defines count too
        hashed += b"\0template\0" + template.source.encode()
    return Task(
        name=_text(data["name"], "name"),
        description=_text(data["description"], "description").strip(),
        directory=str(path.resolve()),
        size_names=size_names,
        args=args,
        constants=tuple((str(k), _number(v, f"constant {k}")) for k, v in constants.items()),
        test_sizes=test_sizes,
        bench_size=bench_size,
        atol=tolerance.atol,
        rtol=tolerance.rtol,
        bytes_expr=str(data["bytes"]),
        flops_expr=str(data["flops"]),
        baseline_source=baseline,
        template_source=template.source if template else None,
        template_where=template.where if template else "",
        reference_source=reference,
        has_library=False,
        content_hash=hashlib.sha256(hashed).hexdigest()[:16],
        floor=tolerance.floor,
        stress=stress,
        library=" ".join(_text(data.get("library", ""), "library").split()),
    )


def _stress(table: dict[str, Any], size_names: tuple[str, ...], args: tuple[Arg, ...], test_sizes: tuple[Size, ...],
            tolerance: dtypes.Tolerance) -> Stress:
    """A `[[stress]]` table: its name, the inputs it maps (default: every floating-point input),
    scale and offset, the size (default: the largest test size) and a tolerance (default: the
    task's)."""
    name = _text(table["name"], "stress name")
    floats = [a.name for a in args if a.intent == "in" and a.dtype in dtypes.FLOAT]
    mapped = _names(table["args"], f"stress {name} args") if "args" in table else floats
    strange = sorted(set(mapped) - set(floats))
    if strange or not mapped:
        raise ValueError(f"stress {name}: args must name floating-point inputs ({', '.join(floats) or 'none'}), "
                         f"not {strange or 'nothing'}")
    scale, offset = _number(table.get("scale", 1.0), f"stress {name} scale"), _number(table.get("offset", 0.0), f"stress {name} offset")
    if not (math.isfinite(scale) and math.isfinite(offset)) or scale == 0 or (scale == 1 and offset == 0):
        raise ValueError(f"stress {name}: scale and offset must be finite, scale not 0, and change the inputs")
    largest = max(test_sizes, key=lambda size: math.prod(v for _, v in size))
    size = _size(table["size"], size_names) if "size" in table else largest
    tol = {k: _number(table.get(k, getattr(tolerance, k)), f"stress {name} {k}") for k in ("atol", "rtol", "floor")}
    if not 0 <= tol["rtol"] < 1 or tol["atol"] < 0 or tol["floor"] < 0:
        raise ValueError(f"stress {name}: rtol must be in [0, 1), atol and floor not negative")
    return Stress(name, size, tuple(mapped), scale, offset, tol["atol"], tol["rtol"], tol["floor"])


def _arg(table: dict[str, Any], size_names: tuple[str, ...]) -> Arg:
    name = _text(table["name"], "arg name")
    shape = table["shape"]
    if not isinstance(shape, list) or not all(isinstance(d, str | int) and not isinstance(d, bool) for d in shape):
        raise ValueError(f"arg {name}: shape must be a list of expressions of the sizes")
    arg = Arg(name, _text(table["dtype"], f"arg {name} dtype"), tuple(str(s) for s in shape),
              _text(table["intent"], f"arg {name} intent"))
    if arg.intent not in ("in", "out"):
        raise ValueError(f"arg {name}: intent must be 'in' or 'out'")
    if arg.dtype not in cfmt.DTYPES:
        raise ValueError(f"arg {name}: dtype {arg.dtype!r} is not one of {', '.join(sorted(cfmt.DTYPES))}")
    for dim in arg.shape:
        unknown = expr.names_in(dim) - set(size_names)
        if unknown:
            raise ValueError(f"arg {name}: shape uses unknown size(s) {sorted(unknown)}")
    return arg


def _size(table: Any, size_names: tuple[str, ...]) -> Size:
    if not isinstance(table, dict) or set(table) != set(size_names):
        raise ValueError(f"size {table} must give exactly {list(size_names)}")
    for n in size_names:
        if not isinstance(table[n], int) or isinstance(table[n], bool) or not 1 <= table[n] < 2**31:
            raise ValueError(f"size {table}: {n} must be a positive integer")
    return tuple((n, int(table[n])) for n in size_names)


def _names(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.isidentifier() for v in value):
        raise ValueError(f"{key} must be a non-empty list of identifiers")
    if len(set(value)) != len(value):
        raise ValueError(f"{key} names one twice")
    return value


def _tables(value: Any, key: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"{key} must be a list of tables")
    return value


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string, not {value!r}")
    return value


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{key} must be a number >= 0, not {value!r}")
    return float(value)


def _read(path: Path) -> str:
    """A task file's text through the gate every user-named file passes (fsr.files.read_input)."""
    try:
        return read_input(path)
    except InputFileError as e:
        raise TaskError(str(e)) from None


def _check_sources(task: Task, path: Path) -> None:
    """The baseline (and template) must be candidates of this task."""
    for where, source in ((f"{path}/baseline.cu", task.baseline_source), (task.template_where, task.template_source)):
        if source:
            try:
                cfmt.parse(source, task)
            except cfmt.HeaderError as e:
                raise TaskError(f"{where}: {e}") from None


def shape_of(task: Task, arg: Arg, sizes: dict[str, int]) -> tuple[int, ...]:
    """Concrete shape of a task buffer at these sizes."""
    return tuple(expr.evaluate_int(d, sizes) for d in arg.shape)


def bytes_moved(task: Task, sizes: dict[str, int]) -> float:
    return float(expr.evaluate(task.bytes_expr, sizes))


def flops(task: Task, sizes: dict[str, int]) -> float:
    return float(expr.evaluate(task.flops_expr, sizes))


_MODULES: dict[str, ModuleType] = {}  # by content hash: a changed task is a new module
_CHECKED: set[str] = set()  # content hashes of tasks whose functions passed check_functions


def functions(task: Task) -> ModuleType:
    """The task's reference.py module (make_inputs, reference, optional library), loaded from the
    text the Task carries, never from disk, so every process runs what the driver loaded. Task
    code is trusted user code, like a test suite: it is written by people, never by a proposer."""
    if task.content_hash not in _MODULES:
        path = Path(task.directory) / "reference.py"
        module = ModuleType(f"fsr_task_{task.name}")
        module.__file__ = str(path)  # tracebacks and messages name the file it came from
        try:
            exec(compile(task.reference_source, str(path), "exec"), module.__dict__)
        except SyntaxError as e:
            raise TaskError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
        except Exception as e:
            raise TaskError(f"{_where(path, e)}: importing it raised {type(e).__name__}: {e}") from None
        for fn in ("make_inputs", "reference"):
            if not callable(getattr(module, fn, None)):
                raise TaskError(f"{path} lacks {fn}()")
        _MODULES[task.content_hash] = module
    return _MODULES[task.content_hash]


def forget(task: Task | None = None) -> None:
    """Drop `task`'s loaded module, and whatever it holds (an imported task's comparator model),
    so the next `functions(task)` loads it afresh; without a task, every module and the record of
    checked tasks (for tests)."""
    if task is not None:
        _MODULES.pop(task.content_hash, None)
        return
    _MODULES.clear()
    _CHECKED.clear()


def _where(path: Path, error: BaseException) -> str:
    """`path:line` of the innermost frame of `error`'s traceback that is in `path`."""
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__) if Path(f.filename) == path]
    return f"{path}:{lines[-1]}" if lines else str(path)


# make_inputs runs at load at every test size, and at the benchmark size, whose inputs hold at most
# CHECK_ELEMENTS elements (drawing them costs milliseconds; a task's largest sizes would cost
# seconds at every load); the float64 reference at those up to REFERENCE_CHECK_ELEMENTS, and
# always at the smallest test size. Larger sizes' shapes are checked from task.toml's expressions
# (they evaluate, none is negative) when the task is parsed.
CHECK_ELEMENTS = 2**21
REFERENCE_CHECK_ELEMENTS = 2**16


def input_elements(task: Task, size: dict[str, int]) -> int:
    """How many elements the task's inputs hold at this size (by task.toml's shapes)."""
    return sum(math.prod(shape_of(task, a, size)) for a in task.args if a.intent == "in")


def check_functions(task: Task) -> None:
    """make_inputs and reference give arrays of the names, shapes and dtypes task.toml declares,
    at every size small enough to draw at load (CHECK_ELEMENTS); raises TaskError naming the
    size. Once per task content."""
    if task.content_hash in _CHECKED:
        return
    module = functions(task)
    path = Path(task.directory) / "reference.py"
    smallest = min(task.test_sizes, key=lambda s: math.prod(v for _, v in s))
    for size in sorted(dict.fromkeys((smallest, *task.test_sizes, task.bench_size)),
                       key=lambda s: input_elements(task, dict(s))):
        elements = input_elements(task, dict(size))
        if size == smallest or elements <= CHECK_ELEMENTS:
            _check_size(task, module, path, dict(size),
                        reference=size == smallest or elements <= REFERENCE_CHECK_ELEMENTS)
    for stress in task.stress:
        if input_elements(task, dict(stress.size)) <= CHECK_ELEMENTS:
            stress_inputs(task, module, stress, np.random.default_rng(0))
    _CHECKED.add(task.content_hash)


def stress_inputs(task: Task, module: ModuleType, stress: Stress, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """make_inputs at the stress set's size with its floating-point inputs mapped to x * scale +
    offset, rounded back to their dtype; raises TaskError where that leaves one non-finite (the
    declaration is wrong for the task's inputs, not a kernel)."""
    inputs = module.make_inputs(dict(stress.size), rng)
    check_inputs(task, inputs, dict(stress.size))
    for name in stress.args:
        mapped = stress_mapped(inputs[name], stress.scale, stress.offset)
        if mapped is None:
            raise TaskError(f"{task.directory}/task.toml: stress set {stress.name!r} makes input {name} non-finite "
                            f"({inputs[name].dtype} x {stress.scale:g} + {stress.offset:g})")
        inputs[name] = mapped
    return inputs


def stress_mapped(x: np.ndarray, scale: float, offset: float = 0.0) -> np.ndarray | None:
    """A stress set's mapping of one floating-point input: x * scale + offset, rounded back to
    x's dtype; None where that leaves an element non-finite."""
    with np.errstate(over="ignore"):  # an overflow is what None reports
        mapped = (x.astype(np.float64) * scale + offset).astype(x.dtype)
    return mapped if np.isfinite(mapped.astype(np.float64)).all() else None


def _check_size(task: Task, module: ModuleType, path: Path, size: dict[str, int], reference: bool) -> None:
    try:
        inputs = module.make_inputs(dict(size), np.random.default_rng(0))
    except Exception as e:
        raise TaskError(f"{_where(path, e)}: make_inputs({size}) raised {type(e).__name__}: {e}") from None
    check_inputs(task, inputs, size, path)
    if not reference:
        return
    try:
        outputs = module.reference({k: v.copy() for k, v in inputs.items()}, dict(size))
    except Exception as e:
        raise TaskError(f"{_where(path, e)}: reference(..., {size}) raised {type(e).__name__}: {e}") from None
    _check_arrays(task, path, f"reference(..., {size})", outputs, list(task.outputs), size, check_dtypes=False)
    _check_zeros_fail(task, path, outputs, size)


def _check_zeros_fail(task: Task, path: Path, outputs: dict[str, Any], size: dict[str, int]) -> None:
    """A low-precision output's tolerance must reject an output of zeros at every size whose
    reference runs at load: an absolute atol above the op's outputs would let one pass."""
    for arg in task.outputs:
        if arg.dtype in dtypes.LOW_PRECISION:
            ref = np.asarray(outputs[arg.name], dtype=np.float64)
            if bool((np.abs(ref) <= dtypes.bounds(ref, tolerance(task))).all()):
                raise TaskError(f"{path.parent}/task.toml: at {size}, an output {arg.name} of zeros passes the "
                                f"tolerance (atol {task.atol:g} against outputs of mean |ref| "
                                f"{dtypes.magnitude(ref):.3g}): make it relative (atol 0, rtol, floor)")


def tolerance(task: Task) -> dtypes.Tolerance:
    """The task's tolerance rule (fsr.dtypes.bounds)."""
    return dtypes.Tolerance(task.atol, task.rtol, task.floor)


def check_inputs(task: Task, inputs: Any, size: dict[str, int], path: Path | None = None) -> None:
    """make_inputs' arrays at `size` against task.toml: the names, shapes and dtypes a kernel's
    buffers are declared with (anything else is garbage to it); raises TaskError."""
    path = path or Path(task.directory) / "reference.py"
    _check_arrays(task, path, f"make_inputs({size})", inputs, [a for a in task.args if a.intent == "in"], size)


def _check_arrays(task: Task, path: Path, call: str, got: Any, args: list[Arg], size: dict[str, int],
                  check_dtypes: bool = True) -> None:
    if not isinstance(got, dict):
        raise TaskError(f"{path}: {call} returned {type(got).__name__}, not a dict of arrays")
    wanted = {a.name for a in args}
    if set(got) != wanted:
        raise TaskError(f"{path}: {call} returned {sorted(map(str, got))}, task.toml declares {sorted(wanted)}")
    for arg in args:
        value, shape = got[arg.name], shape_of(task, arg, size)
        if not isinstance(value, np.ndarray):
            raise TaskError(f"{path}: {call}[{arg.name!r}] is a {type(value).__name__}, not a NumPy array")
        if value.shape != shape:
            raise TaskError(f"{path}: {call}[{arg.name!r}] has shape {value.shape}, task.toml says {shape}")
        if check_dtypes and value.dtype != dtypes.numpy_dtype(arg.dtype):
            raise TaskError(f"{path}: {call}[{arg.name!r}] has dtype {value.dtype}, task.toml says {arg.dtype}")
