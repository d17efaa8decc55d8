"""A task's feature template: its own template.cu, or another task's, named in its task.toml with
defines of its own, so that one file serves an op's family (a dtype, a causal mask):

    template = { task = "attention_bf16", defines = { CAUSAL = 1 } }

The named task is a folder beside this one, else a built-in task. Its template may name another
in turn; the defines of the whole chain apply, the nearer task's value winning. What candidates,
proposers, prompts and exports see is the resolved text: the named template with one
`#define NAME value` line per define just after its header, so a model shown it keeps the
variant, and the compile cache and the task's content hash cover it. A define must be one the
template tests in a preprocessor condition (`#if`, `#ifdef`, `#ifndef`, `#elif`), never one of
its tunables or switches (the search sets those): a misspelt or stray define is refused rather
than ignored. Every declaration error is a ValueError of one line; fsr.tasks names the file.

Where a variant's kernels take other arguments (a bias), its header lines differ too: a header
line `#if COND: KEY = VALUE` (a TOML comment, so the file as it is stays the family's own
candidate) is, where COND holds for the defines, `KEY = VALUE` in place of the line above it when
that sets the same key, else a line of its own:

    args = ["A", "B", "C", "M", "N", "K"]
    #if GELU: args = ["A", "B", "bias", "C", "M", "N", "K"]

COND is a condition as a launch's `when` writes it, of names the template's code tests (a name no
define sets is 0, as the preprocessor has it); the resolved text, the family's own included, has
no such lines left.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsr import candidate as cfmt
from fsr import expr
from fsr.files import InputFileError, read_input

TASK_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # a folder's name: no path, no "..", no "/"
CONDITION_RE = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif)\b(.*)$", re.M)
HEADER_IF_RE = re.compile(r"^[ \t]*#if[ \t]+([^:\n]*):[ \t]*(.*?)[ \t]*$")  # a header's `#if COND: LINE`
KEY_RE = re.compile(r"^[ \t]*([A-Za-z0-9_-]+)[ \t]*=")  # the key a TOML line sets
KEYS = {"task", "defines"}


@dataclass(frozen=True)
class Template:
    """A task's resolved template: `source` is what candidates see; `path` the template.cu it is
    read from; `defines` the variant's own (empty for a task's own template.cu); `chain` the
    tasks named on the way, nearest first."""

    source: str
    path: Path
    defines: tuple[tuple[str, int], ...] = ()
    chain: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        """The file, with the defines a variant applies to it: for messages."""
        return f"{self.path} with {_defines_text(self.defines)}" if self.chain else str(self.path)


def resolve(folder: Path, data: Mapping[str, Any], roots: tuple[Path, ...]) -> Template | None:
    """The template of the task in `folder` (its task.toml parsed as `data`): its template.cu, or
    the one its `template` declaration names, looked up under `roots` (the folder's own tasks
    directory first, then the built-in tasks); None when it has neither. Raises ValueError."""
    own = folder / "template.cu"
    if "template" not in data:
        return Template(_select(_read(own), {}, own), own) if own.is_file() else None
    chain: list[str] = []
    seen = [folder.resolve()]
    merged: dict[str, int] = {}
    here, declared = folder, data
    while "template" in declared:
        if (here / "template.cu").is_file():
            raise ValueError(f"{here.name} has both template.cu and a `template` in task.toml: keep one")
        name, defines = _declaration(declared["template"], here.name)
        merged = defines | merged  # the nearer task's value wins
        chain.append(name)
        here = _folder(name, roots)
        if here.resolve() in seen:
            raise ValueError(f"template: the tasks named form a cycle: {' -> '.join([folder.name, *chain])}")
        seen.append(here.resolve())
        declared = _toml(here / "task.toml")
    path = here / "template.cu"
    if not path.is_file():
        raise ValueError(f"template: task {chain[-1]!r} ({here}) has no template.cu")
    text = _select(_read(path), merged, path)
    _check_defines(text, merged, chain[-1])
    owner = data["name"] if isinstance(data.get("name"), str) else folder.name
    return Template(_with_defines(text, merged, owner), path, tuple(sorted(merged.items())), tuple(chain))


def _declaration(value: Any, owner: str) -> tuple[str, dict[str, int]]:
    """The task a `template` declaration names and its defines; raises ValueError."""
    if not isinstance(value, dict):
        raise ValueError(f'{owner}: template must be a table: {{ task = "NAME", defines = {{ NAME = integer }} }}, '
                         f"not {value!r}")
    extra = sorted(set(value) - KEYS)
    if extra:
        raise ValueError(f"{owner}: template has unknown key(s) {', '.join(extra)} (it takes task and defines)")
    name = value.get("task")
    if not isinstance(name, str) or not TASK_NAME_RE.match(name):
        raise ValueError(f"{owner}: template.task must be the name of a task (a folder beside this one or a "
                         f"built-in task), not {name!r}")
    defines = value.get("defines", {})
    if not isinstance(defines, dict):
        raise ValueError(f"{owner}: template.defines must be a table of NAME = integer, not {defines!r}")
    for key, number in defines.items():
        if not cfmt.NAME_RE.match(key) or isinstance(number, bool) or not isinstance(number, int):
            raise ValueError(f"{owner}: template define {key} = {number!r} must be an identifier set to an integer")
    return name, dict(defines)


def _folder(name: str, roots: tuple[Path, ...]) -> Path:
    """The folder of the task `name`: the first root that has it."""
    for root in roots:
        if (root / name / "task.toml").is_file():
            return root / name
    where = " or ".join(dict.fromkeys(str(r) for r in roots))
    raise ValueError(f"template names task {name!r}, which is not in {where}")


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(_read(path))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"template: {path}: {e}") from None


def _read(path: Path) -> str:
    try:
        return read_input(path)
    except InputFileError as e:
        raise ValueError(str(e)) from None


def _select(text: str, defines: Mapping[str, int], path: Path) -> str:
    """`text` with its header's `#if COND: LINE` lines applied for `defines` (see the module's
    docstring) and removed; raises ValueError."""
    match = cfmt.HEADER_RE.search(text)
    if match is None or not any(HEADER_IF_RE.match(line) for line in match.group(1).split("\n")):
        return text
    tested, named = _tested(text), set()
    kept: list[str] = []
    for line in match.group(1).split("\n"):
        found = HEADER_IF_RE.match(line)
        if found is None:
            kept.append(line)
            continue
        condition, value = found.groups()
        holds, names = _holds(condition, defines, tested, path)
        key = KEY_RE.match(value)
        if key is None:
            raise ValueError(f"{path}: header line #if {condition.strip()}: {value!r} is no KEY = VALUE line")
        named |= names
        if holds:
            above = KEY_RE.match(kept[-1]) if kept else None
            if above is not None and above.group(1) == key.group(1):
                kept.pop()
            kept.append(value)
    out = text[:match.start(1)] + "\n".join(kept) + text[match.end(1):]
    if named & _header_names(out):
        raise ValueError(f"{path}: header line #if names {', '.join(sorted(named & _header_names(out)))}, "
                         "a tunable or switch (the search sets those; a header line follows the task's defines)")
    return out


def _holds(condition: str, defines: Mapping[str, int], tested: set[str], path: Path) -> tuple[bool, set[str]]:
    """Whether a header line's condition holds for `defines` (0 for a name none sets), and the
    names it reads, each one the code tests; raises ValueError."""
    try:
        names = expr.names_in(condition)
        holds = bool(expr.evaluate(condition, {n: defines.get(n, 0) for n in names}))
    except (ValueError, ArithmeticError) as e:
        raise ValueError(f"{path}: header line #if {condition.strip()}: {e}") from None
    if not names <= tested:
        raise ValueError(f"{path}: header line #if names {', '.join(sorted(names - tested))}, which its code "
                         "tests in no #if, #ifdef, #ifndef or #elif")
    return holds, names


def _tested(text: str) -> set[str]:
    """The names the code of `text` (its header and comments aside) tests in preprocessor
    conditions."""
    code = cfmt.HEADER_RE.sub("", cfmt.strip_comments(text), count=1)
    return {w for line in CONDITION_RE.findall(code) for w in re.findall(r"[A-Za-z_]\w*", line)}


def _check_defines(text: str, defines: Mapping[str, int], owner: str) -> None:
    """Every define is tested by the template's preprocessor conditions and is none of its
    tunables or switches; raises ValueError."""
    switches, tested = _header_names(text), _tested(text)
    for name in defines:
        if name in switches:
            raise ValueError(f"template define {name} is a tunable or switch of {owner}'s template: the search "
                             "sets it, a variant cannot")
        if name not in tested:
            raise ValueError(f"template define {name} is not tested by {owner}'s template (no #if, #ifdef, "
                             "#ifndef or #elif names it)")


def _header_names(text: str) -> set[str]:
    """The tunable and switch names of a template's header (none where it does not parse: the
    task's source check then says why)."""
    match = cfmt.HEADER_RE.search(text)
    try:
        header = tomllib.loads(match.group(1)) if match else {}
    except tomllib.TOMLDecodeError:
        return set()
    return {str(k) for section in ("tunables", "features") if isinstance(header.get(section), dict)
            for k in header[section]}


def _with_defines(text: str, defines: Mapping[str, int], owner: str) -> str:
    """`text` with a `#define` line per define just after its header (before the code that tests
    them; the compile stage prepends the tunables' own before the whole text)."""
    if not defines:
        return text
    match = cfmt.HEADER_RE.search(text)
    at = match.end() if match else 0
    lines = [f"#define {k} {v}  // {owner}'s define (its task.toml names this template)" for k, v in sorted(defines.items())]
    return text[:at] + ("\n" if at else "") + "\n".join(lines) + ("" if at else "\n") + text[at:]


def _defines_text(defines: tuple[tuple[str, int], ...]) -> str:
    return ", ".join(f"{k}={v}" for k, v in defines) or "no defines"
