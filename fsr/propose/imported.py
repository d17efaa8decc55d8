"""How a task that `fsr import` wrote is shown to a model: each fact once, and within the budget.

Its task.toml's description lists every argument and the benchmark size for a person reading the
file; the prompt lists the arguments from the task itself and states the benchmark size once, so
the description enters without those lines. A network's weights and buffers are hundreds of
arguments (ResNet-101 has 626): where the full list does not fit the budget, the module's state
is summarised in steps, each shorter than the one before: grouped by role and shape with every
name, then with the first and last name of each group, then by role alone. The model can name
every argument from the module's source, since each is named after its module path.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from fsr.kernelbench import write
from fsr.types import Arg, Task

STATE_NOTE = ("Every weight and buffer of the module is an input named after its module path, dots as underscores "
              "({example}), filled as the constructor fills it; the module is in training mode, as constructed.")
# What each step of the arguments' list leaves out (the footer of `fsr prompt` names it).
STEPS = ("", "the module's weights and buffers grouped by role and shape",
         "the module's weights and buffers grouped by role and shape, each group's first and last name only",
         "the module's weights and buffers grouped by role only")


@dataclass(frozen=True)
class Imported:
    """What a task's reference.py holds of its import: the problem file's text, and each module
    weight's and buffer's path by argument name."""

    source: str
    paths: dict[str, str]


def imported(task: Task) -> Imported | None:
    """The import of a task `fsr import` wrote, else None (a built-in task); read from the
    reference.py text the task carries."""
    return _read(task.reference_source)


@functools.lru_cache(maxsize=16)
def _read(text: str) -> Imported | None:
    """(parsed once per text: a campaign builds a prompt for every request)"""
    source = write.problem_text(text)
    if source is None:
        return None
    layout = write.problem_layout(text) or {}
    state = layout.get("state") or []
    return Imported(source, {str(p[0]): str(p[1]) for p in state if isinstance(p, list | tuple) and len(p) == 2})


def description(task: Task) -> str:
    """The task's description less what the prompt states elsewhere: the arguments' list (and
    its constants) that `fsr import` writes into task.toml, and the benchmark size, whose note on
    a size scaled down to fit stays."""
    lines, out, listing = task.description.splitlines(), [], False
    for line in lines:
        if line.startswith("Arguments (shapes in the sizes"):
            listing = True
            continue
        if listing and re.match(r"  (in |out|constant) ", line):
            continue
        listing = False
        if line.startswith("Benchmark size: "):
            scaled = re.search(r"\(the file's own sizes, (.*), scaled down to fit (.*)\)\.$", line)
            if scaled:
                out.append(f"The file's own sizes, {scaled.group(1)}, are scaled down to fit {scaled.group(2)}.")
            continue
        out.append(line)
    return "\n".join(out)


def signatures(task: Task, paths: dict[str, str], c_type: Callable[[str], str]) -> tuple[str, ...]:
    """The arguments' list at each step of STEPS (the full list first; with no module state,
    that alone)."""
    def line(a: Arg) -> str:
        return f"- `{a.name}`: {a.dtype}[{', '.join(a.shape)}], {_intent(a)}{c_type(a.dtype)}"

    state = [a for a in task.args if a.name in paths and a.intent == "in"]
    if not state:
        return ("Buffers (in argument order):\n" + "\n".join(line(a) for a in task.args),)
    named = max(state, key=lambda a: paths[a.name].count("."))  # the first of the deepest: a telling example
    note = STATE_NOTE.format(example=f"`{paths[named.name]}` is `{named.name}`")
    full = f"Buffers (in argument order). {note}\n" + "\n".join(line(a) for a in task.args)
    others = "\n".join(line(a) for a in task.args if a not in state)
    head = f"Buffers: forward's inputs and outputs, then the module's {len(state)} weights and buffers, all inputs (read-only)"
    roles = _roles(state, paths)
    by_shape = _groups(state, lambda a: (roles[a.name], a.dtype, a.shape))
    by_role = _groups(state, lambda a: (roles[a.name], a.dtype))
    return (full,
            f"{head}, grouped by role and shape. {note}\n{others}\n" + "\n".join(_group(g, roles, True) for g in by_shape),
            f"{head}, grouped by role and shape. {note}\n{others}\n" + "\n".join(_group(g, roles, False) for g in by_shape),
            f"{head}, grouped by role. {note}\n{others}\n" + "\n".join(_group(g, roles, False) for g in by_role))


def _intent(a: Arg) -> str:
    return "input (read-only)" if a.intent == "in" else "output"


def _groups(args: list[Arg], key: Callable[[Arg], object]) -> list[list[Arg]]:
    """`args` grouped by `key`, groups in the order of their first member."""
    groups: dict[object, list[Arg]] = {}
    for a in args:
        groups.setdefault(key(a), []).append(a)
    return list(groups.values())


def _group(group: list[Arg], roles: dict[str, str], every: bool) -> str:
    """One group as a line: count, role, dtype, shape(s) and its names (all, or first and last)."""
    first = group[0]
    shapes = list(dict.fromkeys(f"[{', '.join(a.shape)}]" for a in group))
    shape = shapes[0] if len(shapes) == 1 else f", {len(shapes)} shapes from {shapes[0]} to {shapes[-1]}"
    names = [f"`{a.name}`" for a in group]
    if not every and len(names) > 2:
        names = [names[0], "...", names[-1]]
    return f"- {len(group)} x {roles[first.name]}, {first.dtype}{shape}: {', '.join(names)}"


def _roles(state: list[Arg], paths: dict[str, str]) -> dict[str, str]:
    """Each state argument's role: its parameter's name (weight, bias, running_mean, ...), after
    the kind of module that holds it where the module's parameters tell it (a batch norm keeps
    running statistics; a weight of rank 3 or more is a convolution's, of rank 2 a linear
    layer's)."""
    owners: dict[str, dict[str, Arg]] = {}
    for a in state:
        owner, _, param = paths[a.name].rpartition(".")
        owners.setdefault(owner, {})[param] = a
    roles = {}
    for params in owners.values():
        weight = params.get("weight")
        kind = ("batch-norm" if "running_mean" in params else "" if weight is None else
                "conv" if len(weight.shape) >= 3 else "linear" if len(weight.shape) == 2 else "norm")
        for param, a in params.items():
            roles[a.name] = f"{kind} {param}".strip()
    return roles
