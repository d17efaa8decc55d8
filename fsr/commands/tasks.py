"""`fsr tasks`: every task in brief, or named tasks in full.

Descriptions are the task author's plain text: they are printed as written, never as rich
markup (`x[i]` and `[b]` are indexing, not styles), and never cut mid-sentence: the list shows
what each task computes (its first sentence up to the formula, with an ellipsis), wrapped to the
terminal, and `fsr tasks NAME` the whole description with the task's sizes and arguments.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import textwrap
import warnings

from fsr import config as cfg_mod
from fsr import tasks
from fsr.commands import EXIT_OK, EXIT_USAGE, UsageError
from fsr.types import Task, size_label

# A sentence ends at a full stop followed by a space and a capital (or an opening bracket):
# "x[0] + ... + x[i], int32. Inputs are" splits after "int32.", "... + x" and "e.g. the" do not.
SENTENCE_END = re.compile(r"(?<=\.)\s+(?=[A-Z(])")


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("tasks", help="list the tasks; with names, show those tasks in full")
    parser.add_argument("names", nargs="*", metavar="TASK", help="show these tasks in full")


def tasks_command(args: argparse.Namespace) -> int:
    """Every task in brief, or the named tasks in full. A task that does not load is one line on
    stderr and exit 2 (the list still shows the others)."""
    if args.config:
        cfg_mod.load(args.config)  # a missing or malformed config is bad input here too
    if args.names:
        loaded = [quiet_load(name, args.tasks_dir) for name in args.names]  # TaskError: exit 2
        print("\n\n".join(describe(name, t, _width()) for name, t in zip(args.names, loaded, strict=True)))
        return EXIT_OK
    return list_tasks(args.tasks_dir)


def quiet_load(name: str, root: str | None) -> Task:
    """tasks.load without the warnings a task's reference.py raises as it runs its module (an
    imported task's PyTorch code warns of deprecated arguments): a listing is no place for them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tasks.load(name, root)


NAME_COLUMN_MAX = 32  # longer names sit on their own line, so the text keeps its width


def list_tasks(root: str | None) -> int:
    """Each task's name, what it computes and its benchmark size; exit 2 if one does not load, or
    there is none (an empty folder is a wrong --tasks-dir, not an empty list)."""
    broken, blocks = [], []
    names = tasks.list_tasks(root)
    if not names:
        raise UsageError(f"no tasks in {tasks.tasks_dir(root)} (a task is a folder holding a task.toml; "
                         "fsr import writes them from KernelBench files)")
    column = min(max((len(n) for n in names), default=0) + 2, NAME_COLUMN_MAX)
    for name in names:
        try:
            t = quiet_load(name, root)
        except tasks.TaskError as e:
            broken.append(str(e))
            continue
        blocks.append(_entry(name, t, column, _width()))
    if blocks:
        print("\n".join(blocks))
        print("\nfsr tasks NAME shows a task in full.")
    for message in broken:
        print(f"fsr: error: {' '.join(message.split())}", file=sys.stderr)
    return EXIT_USAGE if broken else EXIT_OK


def _entry(name: str, task: Task, column: int, width: int) -> str:
    """The task's name (its folder's: what commands take), the gist of its description, its dtype (its
    outputs') and its benchmark size, wrapped to `width`."""
    pad = " " * column
    gist = textwrap.fill(summary(task.description), width, initial_indent=pad, subsequent_indent=pad)
    bench = (f"{pad}{task.dtype}; bench {size_label(task.bench_size)}"
             + ("; library comparator" if task.has_library else ""))
    if len(name) + 2 > column:  # a long name (an imported task's) on a line of its own
        return f"{name}\n{gist}\n{bench}"
    return name.ljust(column) + gist[column:] + "\n" + bench


def summary(description: str) -> str:
    """What the task computes, on one line: the description's first sentence, up to its first
    colon outside brackets where it has one (what comes after is the formula); an ellipsis says
    that more follows."""
    text = " ".join(description.split())
    sentence = SENTENCE_END.split(text, maxsplit=1)[0]
    depth = 0
    for i, char in enumerate(sentence):
        depth += (char in "([{") - (char in ")]}")
        if char == ":" and depth == 0 and sentence[i + 1:i + 2] == " ":
            return sentence[:i] + " ..."
    return sentence if sentence == text else sentence + " ..."


def describe(name: str, task: Task, width: int) -> str:
    """One task in full, as plain text wrapped to `width` columns."""
    indent = "  "

    def para(text: str) -> str:
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent * 2)

    lines = [f"{name}  ({task.directory})", *keep_lines(task.description, width, indent)]
    lines.append(para(f"bench size {size_label(task.bench_size)}; test sizes "
                      + "; ".join(size_label(s) for s in task.test_sizes)))
    for arg in task.args:
        lines.append(f"{indent}{arg.intent:<4}{arg.name}: {arg.dtype} [{', '.join(arg.shape)}]")
    if task.constants:
        lines.append(indent + "constants " + ", ".join(f"{k} = {v:g}" for k, v in task.constants))
    lines.append(f"{indent}tolerance ({task.dtype} outputs): {tasks.tolerance(task).label()}")
    lines.append(f"{indent}library comparator: {task.library or 'yes' if task.has_library else 'none'}")
    if task.template_source:
        lines.append(f"{indent}feature template: {task.template_where}")
    return "\n".join(lines)


HARD_WRAPPED = 72  # a line of prose at least this long that ends mid-sentence goes on in the next


def keep_lines(text: str, width: int, indent: str) -> list[str]:
    """The description as its author broke it into lines (an imported task's holds a table of
    arguments and the module's Python source): a long line of prose is wrapped, an indented one
    (code, a table) is kept whole; prose the author wrapped by hand (a long line that ends
    mid-sentence) is joined to the next line first, so that it is wrapped to this width."""
    lines: list[str] = []
    for line in text.strip("\n").splitlines():
        if (lines and line.strip() and not line[:1].isspace() and len(lines[-1]) >= HARD_WRAPPED
                and not lines[-1].rstrip().endswith((".", ":"))):
            lines[-1] = lines[-1].rstrip() + " " + line
        else:
            lines.append(line)
    out = []
    for line in lines:
        if len(indent + line) <= width or line[:1].isspace():
            out.append((indent + line).rstrip())
        else:
            out += textwrap.wrap(line, width, initial_indent=indent, subsequent_indent=indent * 2)
    return out


def _width() -> int:
    return max(40, min(100, shutil.get_terminal_size().columns))
