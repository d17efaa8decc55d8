"""Write a plan as a task folder: task.toml and reference.py, which holds the runtime, this task's
layout and the KernelBench file's text, so that the task is one module that needs nothing but
NumPy and torch (a campaign ships reference.py's text to its workers, never files beside it)."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import uuid
from pathlib import Path

from fsr import pyast
from fsr.files import read_input
from fsr.kernelbench import cast, runtime, scale, stress
from fsr.kernelbench.plan import Plan
from fsr.kernelbench.probe import ProblemError
from fsr.types import bytes_text

MARKER = "# Written by `fsr import`"
CAST_BANNER = "A module run in float16 or bfloat16, as KernelBench v0.2 runs one (fsr/kernelbench/cast.py)."

TAIL = '''

# This task: its arguments' names, and the problem file's text (at the end of this file).


def make_inputs(sizes, rng):
    return draw(_SOURCE, _LAYOUT, sizes, rng)


def reference(inputs, sizes):
    return reference64(_SOURCE, _LAYOUT, inputs, sizes)


def torch_module(inputs, sizes):
    """(PyTorch's module with the task's weights, built once per sizes; forward's arguments from
    `inputs`): what a comparator times, eager or compiled."""
    return module32(_SOURCE, _LAYOUT, inputs, sizes)


def torch_eager(inputs, sizes):
    import torch

    model, activations = torch_module(inputs, sizes)
    with torch.no_grad():
        return model(*activations)


_LAYOUT = {layout}

_SOURCE = {source}
'''


def task_name(path: Path) -> str:
    """`kb1_19_relu` for level1/19_ReLU.py; the file's stem, lower case, elsewhere."""
    stem = re.sub(r"\W+", "_", path.stem).strip("_").lower()
    level = re.fullmatch(r"level(\d+)", path.parent.name)
    return f"kb{level.group(1)}_{stem}" if level else stem or "problem"


def write(path: Path, plan: Plan, out: Path) -> Path:
    """The task folder `out/<name>`, replacing one that an earlier import wrote (`fsr import`
    writes into a staging folder, then `place`s the task)."""
    name = task_name(path)
    folder = out / name
    check_replaceable(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    source = read_input(path)
    header = f"{MARKER} from {path.name} (its text is _SOURCE at the end of this file).\n"
    code = Path(runtime.__file__).read_text()
    tail = TAIL.format(layout=repr(plan.layout), source=literal(source))
    if plan.dtype != "float32":  # inputs, weights and the comparators' module in the dtype (cast.py)
        code += "\n\n# " + CAST_BANNER + Path(cast.__file__).read_text().split(f"\n{cast.COPY_FROM}\n", 1)[1]
        for plain, cast_name in (("draw(", "cast_draw("), ("reference64(", "cast_reference("), ("module32(", "cast_module(")):
            tail = tail.replace(f"return {plain}", f"return {cast_name}")
    (folder / "reference.py").write_text(header + code + tail)
    (folder / "task.toml").write_text(toml(path, name, plan))
    return folder


def check_replaceable(folder: Path) -> None:
    """Raises ProblemError where `folder` exists and is not a task an earlier import wrote."""
    if folder.exists() and not _imported(folder):
        raise ProblemError(f"{folder} exists and is not an imported task")


def place(staged: Path, out: Path) -> Path:
    """Move the task folder `staged` to `out/<its name>`, replacing an earlier import of it, so
    that it appears there whole or not at all; `out` is created here, by the first import that
    succeeds. Raises ProblemError where that folder holds something else."""
    final = out / staged.name
    check_replaceable(final)
    out.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    incoming, old = out / f".importing-{staged.name}-{tag}", out / f".replaced-{staged.name}-{tag}"
    shutil.move(staged, incoming)  # a rename where both are on one file system, else a copy
    if final.exists():
        os.replace(final, old)
    os.replace(incoming, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def _imported(folder: Path) -> bool:
    """Whether `fsr import` wrote this folder (earlier versions left problem.py beside reference.py)."""
    reference = folder / "reference.py"
    return (folder / "problem.py").is_file() or reference.is_file() and reference.read_text().startswith(MARKER)


def problem_text(reference: str) -> str | None:
    """The problem file's text held by a reference.py this module wrote (its `_SOURCE`; "" if
    that cannot be read back), or None for any other reference.py."""
    if not reference.startswith(MARKER):
        return None
    try:
        tree = pyast.parse(reference)
    except SyntaxError:
        return ""
    for node in reversed(tree.body):
        if (isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["_SOURCE"]
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    return ""


def problem_layout(reference: str) -> dict | None:
    """The task's layout held by a reference.py this module wrote (its `_LAYOUT`: forward's
    inputs, the module's state as [name, module path] pairs, the outputs), or None."""
    if not reference.startswith(MARKER):
        return None
    try:
        tree = pyast.parse(reference)
    except SyntaxError:
        return None
    for node in reversed(tree.body):
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["_LAYOUT"]:
            try:
                layout = ast.literal_eval(node.value)
            except ValueError:
                return None
            return layout if isinstance(layout, dict) else None
    return None


def literal(text: str) -> str:
    """`text` as a Python literal that reads like the file: a raw triple-quoted string where
    that gives `text` back exactly, else repr."""
    raw = f"r'''{text}'''"
    try:
        if "\r" not in text and ast.literal_eval(raw) == text:
            return raw
    except (SyntaxError, ValueError):  # the text closes the quotes: repr is always right
        pass
    return repr(text)


def _string(text: str) -> str:
    return f"'''\n{text}'''" if "'''" not in text and "\r" not in text else json.dumps(text)


def _size(s: dict[str, int]) -> str:
    return "{ " + ", ".join(f"{k} = {v}" for k, v in s.items()) + " }"


def _listed(s: dict[str, int]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in s.items())


def _file_sizes(plan: Plan) -> list[str]:
    """The comment that keeps the file's own sizes where the benchmark size was scaled down."""
    if not plan.scaled:
        return []
    return [f"# the file's own sizes, {scale.gigabytes(plan.file_bench_bytes)} of arguments, scaled down to fit "
            f"--max-bench-bytes {bytes_text(plan.max_bench_bytes)}: {_size(plan.file_bench)}"]


def gist(source: str) -> str:
    """The first sentence of the Model class's docstring, without its full stop ("" without one)."""
    import ast

    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return ""
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    text = " ".join((ast.get_docstring(model) or "").split()) if model else ""
    sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].rstrip(".").replace(":", ",")
    return sentence if len(sentence) <= 120 else ""


def description(path: Path, plan: Plan) -> str:
    where = f"{path.parent.name}/{path.name}" if path.parent.name else path.name
    what = gist(path.read_text())
    lines = [f"KernelBench problem {where}{f' ({what})' if what else ''}: compute Model.forward of the PyTorch module below, "
             "in the dtypes given, as one or more kernels.",
             "Arguments (shapes in the sizes; every weight and buffer of the module is an input "
             "named after its module path, filled as the constructor fills it; the module is "
             "in training mode, as constructed):"]
    for arg in plan.args:
        origin = f"  (module {arg.path})" if arg.path else ""
        lines.append(f"  {arg.intent:<3} {arg.name}: {arg.dtype}[{', '.join(arg.shape)}]{origin}")
    for name, value in plan.layout["constants"].items():
        lines.append(f"  constant {name} = {value!r} (the number get_inputs gives; a float32 to a kernel)")
    lines.append(f"Benchmark size: {', '.join(f'{k} = {v}' for k, v in plan.bench.items())}" + (
        f" (the file's own sizes, {_listed(plan.file_bench)}, scaled down to fit a GPU's memory)." if plan.scaled else "."))
    if plan.dtype != "float32":
        lines.append(f"Run in {plan.dtype} as KernelBench v0.2 runs it with that precision: every floating input, "
                     f"weight and buffer is {plan.dtype} (the module's own float32 values rounded), and PyTorch's "
                     f"module computes in {plan.dtype}.")
    lines += [f"{f} equals {leader} at every size (the module accepts them only equal)." for f, leader in plan.ties.items()]
    lines += ["", "The module's source:", "", path.read_text().rstrip(), ""]
    return "\n".join(lines)


def toml(path: Path, name: str, plan: Plan) -> str:
    out = [f"name = {json.dumps(name)}",
           f"description = {_string(description(path, plan))}",
           f"sizes = {json.dumps(list(plan.bench))}",
           "# fewest bytes: each argument read or written once",
           f"bytes = {json.dumps(plan.bytes_expr)}",
           "# PyTorch's FLOP counter (matmuls, convolutions, attention); a literal is the benchmark size's count",
           f"flops = {json.dumps(plan.flops_expr)}",
           *_tolerance(plan),
           "test_sizes = [", *[f"    {_size(s)}," for s in plan.test_sizes], "]",
           *_file_sizes(plan),
           f"bench_size = {_size(plan.bench)}"]
    if plan.layout["constants"]:
        out += ["", "[constants]", *[f"{k} = {float(v)!r}" for k, v in plan.layout["constants"].items()]]
    for arg in plan.args:
        out += ["", "[[args]]", f"name = {json.dumps(arg.name)}", f"dtype = {json.dumps(arg.dtype)}",
                f"shape = {json.dumps(list(arg.shape))}", f"intent = {json.dumps(arg.intent)}"]
    out += stress.toml(plan.stress, plan.dtype)
    return "\n".join(out) + "\n"


def _tolerance(plan: Plan) -> list[str]:
    """task.toml's tolerance lines: float32's measured one, a low-precision dtype's default."""
    if not plan.tolerance:  # float32, or integer outputs (exact in any dtype)
        return [f"# {MARGIN_NOTE}" + (f"; {plan.note}" if plan.note else ""), f"atol = {plan.atol!r}", f"rtol = {plan.rtol!r}"]
    return [f"# No atol or rtol: {plan.dtype} outputs take fsr's default ({plan.tolerance}; ref the float64 forward "
            f"of the inputs and weights rounded to {plan.dtype}), which PyTorch's own {plan.dtype} forward passes "
            "at every test size"]


MARGIN_NOTE = "tolerance: 32 times the largest error of PyTorch's float32 forward against float64 at the test sizes"
