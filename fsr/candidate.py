"""The candidate format: one `.cu` text of device code with a declarative TOML header.

    /* fsr
    [tunables]
    BLOCK = [256, 128, 512, 1024]      # first value is the default

    [features]                          # optional feature switches (feature templates): set by
    VEC4 = [0, 1]                       # proposers as defines, usable in expressions, never tuned

    [[scratch]]                         # optional temporary buffers
    name = "partial"
    dtype = "float32"
    count = "rows * 4"

    [[launch]]                          # one table per launch, run in order on one stream
    kernel = "softmax_rows"
    grid = ["rows"]                     # 1-3 expressions over sizes and tunables
    block = ["BLOCK"]
    smem = "0"                          # dynamic shared memory, bytes
    args = ["x", "y", "rows", "cols"]   # task buffers, scratch, sizes (int), constants (float)
    */

Tunables reach the code as `#define NAME value` lines prepended by the compiler stage.
Users write this format, proposers are asked to write it, and exports use it.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import replace

from fsr import dtypes, expr
from fsr.types import Candidate, LaunchSpec, Origin, Scratch, Task, Tunable

HEADER_RE = re.compile(r"/\*\s*fsr\b(.*?)\*/", re.S)
GLOBAL_RE = re.compile(r"__global__\b(.*?)\b(\w+)\s*\(([^)]*)\)", re.S)
# Qualifiers with arguments that may sit between __global__ and the kernel's name.
BOUNDS_RE = re.compile(r"\b(__launch_bounds__|__maxnreg__|__cluster_dims__)\s*\((?:[^()]|\([^()]*\))*\)")
NAME_RE = re.compile(r"^[A-Za-z_]\w*$")
DTYPES = dtypes.DTYPES
MAX_LAUNCHES = 8


class HeaderError(ValueError):
    """A candidate whose header is missing, malformed, or disagrees with its task or code."""


def parse(text: str, task: Task, origin: Origin | None = None) -> Candidate:
    """Read a candidate from `.cu` text and check it against the task; raises HeaderError."""
    match = HEADER_RE.search(text)
    if match is None:
        if re.search(r"/\*\s*fsr\b", text):
            raise HeaderError("unterminated '/* fsr' header: no '*/' closes it")
        raise HeaderError("no '/* fsr ... */' header: the launches must be declared (see README)")
    try:
        data = tomllib.loads(match.group(1))
    except tomllib.TOMLDecodeError as e:
        raise HeaderError(f"header is not valid TOML: {e}") from None
    unknown = set(data) - {"tunables", "features", "scratch", "launch"}
    if unknown:
        raise HeaderError(f"unknown header section(s): {', '.join(sorted(unknown))}")
    cand = Candidate(
        task=task.name, source=text,
        tunables=_tunables(data.get("tunables", {})),
        features=_tunables(data.get("features", {})),
        scratch=tuple(_scratch(s) for s in _table_list(data, "scratch")),
        launches=tuple(_launch(launch) for launch in _table_list(data, "launch")),
        origin=origin or Origin(),
    )
    if not cand.launches:
        raise HeaderError("header declares no [[launch]]")
    if len(cand.launches) > MAX_LAUNCHES:
        raise HeaderError(f"at most {MAX_LAUNCHES} launches per candidate")
    check(cand, task)
    return cand


def with_defines(cand: Candidate, values: dict[str, int]) -> Candidate:
    """The same candidate compiled with other tunable values (unknown names are refused)."""
    known = {t.name: t for t in cand.tunables + cand.features}
    for name in values:
        if name not in known:
            raise HeaderError(f"no tunable or feature named {name!r}")
    merged = dict(cand.resolved_defines()) | values
    return replace(cand, defines=tuple(sorted(merged.items())))


def check(cand: Candidate, task: Task) -> None:
    """Names in launches exist, expressions evaluate at every test size, kernels are defined in
    the source with matching parameter counts and kinds; raises HeaderError."""
    kernels = kernel_signatures(cand.source)
    buffers = {a.name for a in task.args} | {s.name for s in cand.scratch}
    scalars_int = set(task.size_names)
    scalars_float = {c for c, _ in task.constants}
    tunables = {t.name for t in cand.tunables + cand.features}
    if len(tunables) != len(cand.tunables) + len(cand.features):
        raise HeaderError("a name is declared both as a tunable and as a feature")
    clash = tunables & (buffers | scalars_int | scalars_float)
    if clash:
        raise HeaderError(f"tunable name(s) clash with task names: {', '.join(sorted(clash))}")
    for launch in cand.launches:
        if launch.kernel not in kernels:
            found = ", ".join(sorted(kernels)) or "none"
            raise HeaderError(f"launch names kernel {launch.kernel!r}, but the source defines no "
                              f"__global__ function of that name (found: {found})")
        params = kernels[launch.kernel]
        if len(params) != len(launch.args):
            raise HeaderError(f"kernel {launch.kernel} takes {len(params)} parameters, the launch "
                              f"passes {len(launch.args)}")
        for arg, is_pointer in zip(launch.args, params, strict=True):
            if arg in buffers:
                if not is_pointer:
                    raise HeaderError(f"{launch.kernel}: {arg!r} is a buffer but its parameter is not a pointer")
            elif arg in scalars_int or arg in scalars_float:
                if is_pointer:
                    raise HeaderError(f"{launch.kernel}: {arg!r} is a scalar but its parameter is a pointer")
            else:
                raise HeaderError(f"{launch.kernel}: argument {arg!r} is not a task buffer, scratch "
                                  f"buffer, size ({', '.join(task.size_names)}) or constant")
    for size in task.test_sizes + (task.bench_size,):
        launch_dims(cand, dict(size))
        scratch_counts(cand, dict(size))


def launch_dims(cand: Candidate, sizes: dict[str, int]) -> list[tuple[tuple[int, ...], tuple[int, ...], int]]:
    """(grid, block, smem_bytes) of each launch at these sizes; raises HeaderError."""
    names = dict(sizes) | dict(cand.resolved_defines())
    out = []
    for launch in cand.launches:
        try:
            grid = tuple(expr.evaluate_int(g, names) for g in launch.grid)
            block = tuple(expr.evaluate_int(b, names) for b in launch.block)
            smem = expr.evaluate_int(launch.smem, names)
        except (ValueError, ArithmeticError) as e:  # ExprError; inf or NaN has no integer value
            raise HeaderError(f"{launch.kernel}: {e}") from None
        if any(not 1 <= d < 2**31 for d in grid + block) or not 0 <= smem < 2**31:  # the driver's ints
            raise HeaderError(f"{launch.kernel}: grid {grid} block {block} smem {smem} at "
                              f"{sizes} is not a valid launch")
        out.append((grid, block, smem))
    return out


def scratch_counts(cand: Candidate, sizes: dict[str, int]) -> dict[str, int]:
    """Element count of each scratch buffer at these sizes."""
    names = dict(sizes) | dict(cand.resolved_defines())
    try:
        return {s.name: expr.evaluate_int(s.count, names) for s in cand.scratch}
    except (ValueError, ArithmeticError) as e:  # ExprError; inf or NaN has no integer value
        raise HeaderError(f"scratch: {e}") from None


def kernel_signatures(source: str) -> dict[str, list[bool]]:
    """Each `__global__` function's name and, per parameter, whether it is a pointer."""
    body = BOUNDS_RE.sub(" ", HEADER_RE.sub("", strip_comments(source)))
    out: dict[str, list[bool]] = {}
    for m in GLOBAL_RE.finditer(body):
        params = [p.strip() for p in m.group(3).split(",") if p.strip() and p.strip() != "void"]
        out[m.group(2)] = ["*" in p or "[" in p for p in params]
    return out


# One lexeme of C++ that may hold comment markers or quotes: a raw string literal, a string
# literal, a character literal (not after a digit or letter: 1'000 is a digit separator), a line
# comment, a block comment.
LEXEME_RE = re.compile(r"""R"([^()\\\s]{0,16})\((?:.|\n)*?\)\1"|"(?:\\.|[^"\\\n])*"|(?<!\w)'(?:\\.|[^'\\\n])*'"""
                       r"|//[^\n]*|/\*.*?\*/", re.S)


def strip_comments(source: str) -> str:
    """Source without // and /* */ comments; string and character literals are kept whole (a
    `//` inside a string does not hide the rest of its line). Not a parser: enough for the header
    checks and the static guards."""
    return LEXEME_RE.sub(lambda m: " " if m.group(0)[0] == "/" else m.group(0), source)


def render(body: str, tunables: dict[str, list[int]], launches: list[dict], scratch: list[dict] | None = None,
           features: dict[str, list[int]] | None = None) -> str:
    """A `.cu` text with a header built from plain data and `body` as the code (for proposers)."""
    lines = ["/* fsr"]
    for section, table in (("tunables", tunables), ("features", features or {})):
        if table:
            lines.append(f"[{section}]")
            lines += [f"{k} = [{', '.join(str(v) for v in vals)}]" for k, vals in table.items()]
    for s in scratch or []:
        lines += ["", "[[scratch]]"] + [f"{k} = {_toml_value(v)}" for k, v in s.items()]
    for launch in launches:
        lines += ["", "[[launch]]"] + [f"{k} = {_toml_value(v)}" for k, v in launch.items()]
    lines.append("*/")
    return "\n".join(lines) + "\n" + body.lstrip("\n")


def export(cand: Candidate, defines: tuple[tuple[str, int], ...] = ()) -> str:
    """The candidate's `.cu` text with `defines` (e.g. tuned values) made the defaults: each
    tunable's chosen value moves to the front of its list, each feature is fixed to its value."""
    chosen = dict(cand.resolved_defines()) | dict(defines)
    tunables = {t.name: [chosen[t.name]] + [v for v in t.values if v != chosen[t.name]] for t in cand.tunables}
    features = {f.name: [chosen[f.name]] for f in cand.features}
    launches = [{"kernel": launch.kernel, "grid": list(launch.grid), "block": list(launch.block),
                 "smem": launch.smem, "args": list(launch.args)} for launch in cand.launches]
    scratch = [{"name": s.name, "dtype": s.dtype, "count": s.count, "zero": s.zero} for s in cand.scratch]
    return render(HEADER_RE.sub("", cand.source, count=1), tunables, launches, scratch, features)


def _toml_value(v: object) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return '"' + str(v).replace('"', '\\"') + '"'


def _table_list(data: dict, key: str) -> list[dict]:
    value = data.get(key, [])
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise HeaderError(f"[[{key}]] must be a list of tables")
    return value


def _tunables(table: object) -> tuple[Tunable, ...]:
    if not isinstance(table, dict):
        raise HeaderError("[tunables] must be a table of NAME = [values]")
    out = []
    for name, values in table.items():
        if not NAME_RE.match(name):
            raise HeaderError(f"tunable name {name!r} is not an identifier")
        if isinstance(values, int) and not isinstance(values, bool):
            values = [values]
        if (not isinstance(values, list) or not values
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in values)):
            raise HeaderError(f"tunable {name} needs a non-empty list of integers")
        if len(set(values)) != len(values):
            raise HeaderError(f"tunable {name} lists a value twice")
        out.append(Tunable(name, tuple(values)))
    return tuple(out)


def _scratch(table: dict) -> Scratch:
    _require(table, ("name", "dtype", "count"), "scratch", optional=("zero",))
    if table["dtype"] not in DTYPES:
        raise HeaderError(f"scratch {table['name']}: unknown dtype {table['dtype']!r}")
    if not NAME_RE.match(str(table["name"])):
        raise HeaderError(f"scratch name {table['name']!r} is not an identifier")
    return Scratch(str(table["name"]), str(table["dtype"]), str(table["count"]), bool(table.get("zero", False)))


def _launch(table: dict) -> LaunchSpec:
    _require(table, ("kernel", "grid", "block", "args"), "launch", optional=("smem",))
    dims = {}
    for key in ("grid", "block"):
        value = table[key]
        value = value if isinstance(value, list) else [value]
        if not 1 <= len(value) <= 3:
            raise HeaderError(f"launch {table['kernel']}: {key} needs 1 to 3 dimensions")
        dims[key] = tuple(str(v) for v in value)
    args = table["args"]
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise HeaderError(f"launch {table['kernel']}: args must be a list of names")
    for d in dims["grid"] + dims["block"] + (str(table.get("smem", "0")),):
        try:
            expr.names_in(d)
        except expr.ExprError as e:
            raise HeaderError(f"launch {table['kernel']}: {e}") from None
    return LaunchSpec(str(table["kernel"]), dims["grid"], dims["block"], tuple(args), str(table.get("smem", "0")))


def _require(table: dict, keys: tuple[str, ...], what: str, optional: tuple[str, ...] = ()) -> None:
    missing = [k for k in keys if k not in table]
    if missing:
        raise HeaderError(f"[[{what}]] is missing {', '.join(missing)}")
    extra = set(table) - set(keys) - set(optional)
    if extra:
        raise HeaderError(f"[[{what}]] has unknown key(s) {', '.join(sorted(extra))}")
