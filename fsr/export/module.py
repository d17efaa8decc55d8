"""The text of an exported kernel module: a docstring that says where the kernel came from and how
to call it, fsr's own runtime copied in (fsr/evaluate/device_globals.py, fsr/export/runtime.py,
calls.py, checks.py, less their imports of fsr), the kernel's `Spec` as data, and four public
functions (`run`, `run_torch`, `launch_plan`, `check`).

Nothing of the kernel's text reaches the module as code: the source and the reference are string
literals, names are quoted, and each header expression is rebuilt from its parsed form by
fsr.expr.to_python, which emits only numbers, operators, `v['name']` lookups and three functions.
"""

from __future__ import annotations

import ast
import keyword
import textwrap
from dataclasses import dataclass
from pathlib import Path

import fsr
from fsr import dtypes, expr, pyast, tasks
from fsr.evaluate import compile as compiler
from fsr.evaluate import device_globals
from fsr.export import calls, checks, runtime
from fsr.types import Candidate, Task, size_label

EMBEDDED = (device_globals, runtime, calls, checks)  # in this order: each uses names of those before
PUBLIC = ("run", "run_torch", "launch_plan", "check", "KERNEL", "SPEC")
RESERVED = frozenset({"stream", "KERNEL"})  # names a function's parameters may not take


@dataclass(frozen=True)
class Provenance:
    """Where an exported kernel came from, for the module's docstring."""

    source: str  # the .cu file exported
    candidate_id: str = ""
    median_us: float | None = None
    device: str = ""
    speedup: float | None = None  # over the task's baseline
    toolchain: str = ""  # the compiler that built the judged program


class ExportError(ValueError):
    """A task or kernel that cannot be written as a module (a buffer's name is no Python name)."""


def module_text(task: Task, cand: Candidate, provenance: Provenance, module_name: str = "kernel") -> str:
    """The module's text; `cand` with its tuned values as its defines (or defaults). Raises
    ExportError where a task's buffer name cannot name a parameter."""
    bad = [a.name for a in task.args if not a.name.isidentifier()]
    if bad:
        raise ExportError(f"{task.name}: buffer name(s) {', '.join(map(repr, bad))} are not Python names, "
                          "and the module's functions take the buffers by name")
    parts = [literal(docstring(task, cand, provenance, module_name)), "", "from __future__ import annotations", ""]
    parts += [embedded(m) for m in EMBEDDED]
    parts += [spec_text(task, cand), functions_text(task)]
    return "\n".join(parts)


def literal(text: str) -> str:
    """A Python literal of `text`: a raw triple-quoted string where that reads back exactly, else
    repr (a text holding ''' or ending in a backslash or a quote)."""
    candidate = f"r'''{text}'''"
    try:
        if ast.literal_eval(candidate) == text:
            return candidate
    except (SyntaxError, ValueError):
        pass
    return repr(text)


def embedded(module: object) -> str:
    """A module of fsr's as copied into an export: its docstring a comment line, its
    `from __future__` and fsr imports dropped (their names are defined above it)."""
    path = Path(module.__file__)  # type: ignore[attr-defined]
    text = path.read_text()
    tree = pyast.parse(text)
    lines = text.splitlines()
    drop: set[int] = set()
    for node in tree.body:
        is_doc = node is tree.body[0] and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        ours = isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("__future__", "fsr")
        if is_doc or ours:
            drop.update(range(node.lineno - 1, (node.end_lineno or node.lineno)))
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "fsr" for a in node.names):
            raise RuntimeError(f"{path} imports fsr as a module: it cannot be copied into an export")
        defined = node.name if isinstance(node, ast.FunctionDef | ast.ClassDef) else None
        if defined in PUBLIC:
            raise RuntimeError(f"{path} defines {defined}, a name the export's public functions take")
    where = path.relative_to(Path(fsr.__file__).resolve().parent.parent)
    kept = "\n".join(line for i, line in enumerate(lines) if i not in drop).strip()
    return f"# ---- copied from {where} (fsr {fsr.__version__})\n\n{kept}\n\n"


def docstring(task: Task, cand: Candidate, p: Provenance, module_name: str) -> str:
    timing = f", {p.median_us:.1f} us at {size_label(task.bench_size)}" if p.median_us else ""
    timing += f" on {p.device}" if p.device and timing else ""
    timing += f", {p.speedup:.2f}x the task's baseline" if p.speedup else ""
    built = f"; compiled there with {p.toolchain.split(';')[0]}" if p.toolchain else ""
    defines = " ".join(f"{k}={v}" for k, v in cand.resolved_defines()) or "none"
    about = textwrap.fill(f"From {p.source} (candidate {p.candidate_id or cand.id}{timing}{built}), exported by "
                          f"fsr {fsr.__version__}. Its tuned values, compiled in as #defines: {defines}.", 100,
                          break_on_hyphens=False, break_long_words=False)  # a path stays whole, to copy
    args = ", ".join(_param(a.name) for a in task.inputs)
    outs = ", ".join(_param(a.name) for a in task.outputs)
    calls = [(f"import {module_name}", ""), (f"{outs} = {module_name}.run({args})", "CuPy arrays"),
             (f"{outs} = {module_name}.run_torch({args})", "CUDA tensors, on torch's current stream"),
             (f"{module_name}.check()", "the task's test sizes, twice each, against its reference")]
    width = max(len(code) for code, _ in calls) + 2
    usage = "\n".join(f"    {code:<{width}}# {note}".rstrip() if note else f"    {code}" for code, note in calls)
    described = textwrap.indent(task.description, "    ")
    return f"""{task.name}: a kernel found by fsr, as a module that launches it.

{about}

{usage}

The task:
{described}

Each call does what fsr's judge did before every launch sequence it checked or timed: scratch
buffers allocated and zeroed or NaN-filled as the header declares, the kernel's __device__
variables restored to their initial values; then the header's launches, in order, on one stream.
Outputs are not filled first: the judge filled them with NaN or with decoys, so a kernel judged
correct writes every element.

Needs numpy and cupy, whose NVRTC compiles the kernel at the first call on a device, for its
arch, with the options fsr used (the judged code where NVRTC's version is the same); run_torch
needs torch, check() what the task's reference imports. Not fsr.
"""


def _param(name: str) -> str:
    """A task name as a Python parameter: a keyword or a reserved name gets a trailing _."""
    return f"{name}_" if keyword.iskeyword(name) or name in RESERVED else name


def _tuple(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _expr(text: str) -> str:
    return f"Expr({text!r}, lambda v: {expr.to_python(text, lambda n: f'v[{n!r}]')})"


def spec_text(task: Task, cand: Candidate) -> str:
    """`SPEC = Spec(...)` and `KERNEL = Kernel(SPEC)`: everything the runtime needs, as data."""
    args = [f"Arg({a.name!r}, {a.dtype!r}, {dtypes.device_dtype(a.dtype).name!r}, "
            f"{dtypes.numpy_dtype(a.dtype).itemsize}, {_tuple([_expr(d) for d in a.shape])}, {a.intent!r})"
            for a in task.inputs + task.outputs]
    scratch = [f"Scratch({s.name!r}, {dtypes.numpy_dtype(s.dtype).itemsize}, {_expr(s.count)}, {s.zero!r})"
               for s in cand.scratch]
    launches = [f"Launch({launch.kernel!r},\n           grid={_tuple([_expr(g) for g in launch.grid])},"
                f"\n           block={_tuple([_expr(b) for b in launch.block])},\n           smem={_expr(launch.smem)},"
                f"\n           args={launch.args!r}" + (f",\n           when={_expr(launch.when)}" if launch.when else "")
                + ")" for launch in cand.launches]
    inferred = tuple((n, _sources(task, n)) for n in task.size_names)
    tol = tasks.tolerance(task)
    fields = {
        "task": repr(task.name), "source": literal(compiler.full_source(cand)),
        "kernels": repr(tuple(dict.fromkeys(launch.kernel for launch in cand.launches))),
        "options": repr(compiler.BASE_OPTIONS + cand.compile_options),
        "variant_only": repr(compiler._VARIANT_ONLY.pattern), "sizes": repr(task.size_names),
        "inferred": repr(inferred), "args": _list(args), "constants": repr(task.constants),
        "defines": repr(cand.resolved_defines()), "scratch": _list(scratch), "launches": _list(launches),
        "test_sizes": repr(task.test_sizes), "tolerance": repr((tol.atol, tol.rtol, tol.floor)),
        "reference_source": literal(task.reference_source),
        "reference_path": repr(str(Path(task.directory) / "reference.py")),
    }
    body = ",\n".join(f"    {k}={v}" for k, v in fields.items())
    return f"# ---- the kernel\nSPEC = Spec(\n{body},\n)\nKERNEL = Kernel(SPEC)\n"


def _size_source(task: Task, size: str) -> str:
    """Where a call reads a size from, in words, for the functions' docstrings."""
    found = _sources(task, size)
    if not found:
        return "required"
    name, dim, offset = found[0]
    where = f"{name}.shape[{dim}]" + (f" - {offset}" if offset > 0 else f" + {-offset}" if offset < 0 else "")
    given = "" if name in {a.name for a in task.inputs} else f" when {name} is given, else required"
    return f"{where} where not given{given}"


def _sources(task: Task, size: str) -> tuple[tuple[str, int, int], ...]:
    """(buffer, dimension, offset) of each dimension that gives `size` as its length less the
    offset (`rows`, `rows + 1`, `n - 2`), inputs first: where a call reads the size from."""
    out = []
    for arg in task.inputs + task.outputs:
        for i, dim in enumerate(arg.shape):
            offset = _offset(pyast.parse(dim.strip(), mode="eval").body, size)
            if offset is not None:
                out.append((arg.name, i, offset))
    return tuple(out)


def _offset(node: ast.expr, size: str) -> int | None:
    """k where `node` is `size + k`, `k + size` or `size - k` (k an integer), 0 for `size` alone."""
    if isinstance(node, ast.Name):
        return 0 if node.id == size else None
    if not isinstance(node, ast.BinOp) or not isinstance(node.op, ast.Add | ast.Sub):
        return None
    left, right = node.left, node.right
    if isinstance(node.op, ast.Add) and isinstance(left, ast.Constant):
        left, right = right, left
    if (isinstance(left, ast.Name) and left.id == size and isinstance(right, ast.Constant)
            and type(right.value) is int):
        return right.value if isinstance(node.op, ast.Add) else -right.value
    return None


def _list(items: list[str]) -> str:
    return _tuple(["\n        " + i for i in items]) if items else "()"


def functions_text(task: Task) -> str:
    """The public functions, their parameters named after the task's buffers and sizes."""
    ordered = task.inputs + task.outputs
    keywords = [f"{_param(n)}=None" for n in [a.name for a in task.outputs] + list(task.size_names)]
    signature = ", ".join([_param(a.name) for a in task.inputs] + ["*"] + keywords)
    arrays = "{" + ", ".join(f"{a.name!r}: {_param(a.name)}" for a in ordered) + "}"
    sizes = "{" + ", ".join(f"{n!r}: {_param(n)}" for n in task.size_names) + "}"
    outs = ", ".join(_param(a.name) for a in task.outputs)
    lines = [f"    {_param(a.name)}: {a.dtype} ({', '.join(a.shape)}), "
             f"{'an input' if a.intent == 'in' else 'an output, allocated when not given'}" for a in ordered]
    lines += [f"    {n}: {_size_source(task, n)}" for n in task.size_names]
    bits = sorted({a.dtype for a in ordered if dtypes.device_dtype(a.dtype) != dtypes.numpy_dtype(a.dtype)})
    cupy_note = (f"\n    CuPy has no {' or '.join(bits)}: such arrays hold its bits as unsigned integers of its width."
                 if bits else "")
    args = "\n".join(lines)
    run_doc = literal(f"{task.name} on CuPy arrays of one device, on `stream` (default: the current one); "
                      f"returns {outs}.\n\n{args}{cupy_note}\n    ")
    torch_doc = literal(f"{task.name} on CUDA tensors of one device, on torch's current stream; returns {outs}.\n"
                        f"    torch is imported here, so the module imports without it.\n\n{args}\n    ")
    return f'''# ---- the public functions


def run({signature}, stream=None):
    {run_doc}
    return KERNEL.run_cupy({arrays}, {sizes}, stream)


def run_torch({signature}):
    {torch_doc}
    return KERNEL.run_torch({arrays}, {sizes})


def launch_plan(**sizes):
    """(kernel, grid, block, dynamic shared memory bytes) of each launch at these sizes,
    from the header's expressions and the tuned values."""
    return KERNEL.plan(sizes)


def check(sizes=None, seed=0, runs=2, frameworks=None, quiet=False):
    """Compare with the task's reference: `runs` calls at each size (a list of dicts; default: the
    task's test sizes) through each framework (default: cupy, and torch where it has CUDA), each
    call's outputs NaN-filled first. Returns the worst error over the tolerance (below 1 passes);
    raises AssertionError at the first call past it. The reference is the task's reference.py as
    it was when exported, embedded in SPEC.reference_source."""
    return check_kernel(KERNEL, sizes, seed, runs, frameworks, quiet)
'''
