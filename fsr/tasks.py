"""Load `tasks/<name>/` into a Task record.

A task directory holds:
  task.toml     signature, sizes, tolerances, roofline expressions (declarative)
  reference.py  make_inputs(sizes, rng), reference(inputs, sizes) in float64, optional library(...)
  baseline.cu   the plain human-written kernel, in the candidate format
  template.cu   optional feature template for the offline proposer
"""

from __future__ import annotations

import hashlib
import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

from fsr import expr
from fsr.types import Arg, Size, Task

DEFAULT_TASKS_DIR = Path(__file__).resolve().parent.parent / "tasks"


class TaskError(ValueError):
    """A task that cannot be found or whose files are malformed."""


def tasks_dir(override: str | Path | None = None) -> Path:
    return Path(override) if override else DEFAULT_TASKS_DIR


def list_tasks(root: str | Path | None = None) -> list[str]:
    """Names of the tasks under `root` (each a directory with a task.toml)."""
    base = tasks_dir(root)
    return sorted(p.parent.name for p in base.glob("*/task.toml"))


def load(name_or_path: str | Path, root: str | Path | None = None) -> Task:
    """A Task from a name under `root` or a path to a task directory; raises TaskError."""
    path = Path(name_or_path)
    if not (path / "task.toml").is_file():
        path = tasks_dir(root) / str(name_or_path)
    if not (path / "task.toml").is_file():
        known = ", ".join(list_tasks(root)) or "none"
        raise TaskError(f"unknown task {str(name_or_path)!r} (known: {known})")
    try:
        data = tomllib.loads((path / "task.toml").read_text())
    except tomllib.TOMLDecodeError as e:
        raise TaskError(f"{path}/task.toml: {e}") from None
    try:
        return _task(data, path)
    except (KeyError, TypeError, ValueError) as e:
        raise TaskError(f"{path}/task.toml: {e}") from None


def _task(data: dict[str, Any], path: Path) -> Task:
    size_names = tuple(data["sizes"])
    args = tuple(Arg(a["name"], a["dtype"], tuple(str(s) for s in a["shape"]), a["intent"]) for a in data["args"])
    for a in args:
        if a.intent not in ("in", "out"):
            raise ValueError(f"arg {a.name}: intent must be 'in' or 'out'")
        for dim in a.shape:
            unknown = expr.names_in(dim) - set(size_names)
            if unknown:
                raise ValueError(f"arg {a.name}: shape uses unknown size(s) {sorted(unknown)}")
    test_sizes = tuple(_size(s, size_names) for s in data["test_sizes"])
    baseline = (path / "baseline.cu").read_text()
    template_path = path / "template.cu"
    hashed = b"".join(p.read_bytes() for p in sorted(path.glob("*")) if p.is_file() and p.suffix in (".toml", ".py", ".cu"))
    return Task(
        name=str(data["name"]),
        description=str(data["description"]).strip(),
        directory=str(path.resolve()),
        size_names=size_names,
        args=args,
        constants=tuple((k, float(v)) for k, v in data.get("constants", {}).items()),
        test_sizes=test_sizes,
        bench_size=_size(data["bench_size"], size_names),
        atol=float(data["atol"]),
        rtol=float(data["rtol"]),
        bytes_expr=str(data["bytes"]),
        flops_expr=str(data["flops"]),
        baseline_source=baseline,
        template_source=template_path.read_text() if template_path.is_file() else None,
        has_library=hasattr(functions(path), "library"),
        content_hash=hashlib.sha256(hashed).hexdigest()[:16],
    )


def _size(table: dict[str, int], size_names: tuple[str, ...]) -> Size:
    if set(table) != set(size_names):
        raise ValueError(f"size {table} must give exactly {list(size_names)}")
    return tuple((n, int(table[n])) for n in size_names)


def shape_of(task: Task, arg: Arg, sizes: dict[str, int]) -> tuple[int, ...]:
    """Concrete shape of a task buffer at these sizes."""
    return tuple(expr.evaluate_int(d, sizes) for d in arg.shape)


def bytes_moved(task: Task, sizes: dict[str, int]) -> float:
    return float(expr.evaluate(task.bytes_expr, sizes))


def flops(task: Task, sizes: dict[str, int]) -> float:
    return float(expr.evaluate(task.flops_expr, sizes))


_MODULES: dict[str, ModuleType] = {}


def functions(task_or_dir: Task | str | Path) -> ModuleType:
    """The task's reference.py module (make_inputs, reference, optional library). Task code is
    trusted user code, like a test suite: it is written by people, never by a proposer."""
    directory = Path(task_or_dir.directory if isinstance(task_or_dir, Task) else task_or_dir)
    key = str(directory.resolve())
    if key not in _MODULES:
        spec = importlib.util.spec_from_file_location(f"fsr_task_{directory.name}", directory / "reference.py")
        if spec is None or spec.loader is None:
            raise TaskError(f"{directory}/reference.py not found")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except FileNotFoundError:
            raise TaskError(f"{directory}/reference.py not found") from None
        for fn in ("make_inputs", "reference"):
            if not hasattr(module, fn):
                raise TaskError(f"{directory}/reference.py lacks {fn}()")
        _MODULES[key] = module
    return _MODULES[key]
