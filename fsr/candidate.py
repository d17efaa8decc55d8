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
    args = ["x", "y", "rows", "cols"]   # task buffers, scratch, tensor maps, sizes (int), constants (float)
    when = "cols % 4 == 0"              # optional: the sizes at which this launch runs (default all)
    cluster = ["2"]                     # optional: thread block clusters of 1-3 dimensions
    */

`[[tensormap]]` tables (fsr.tensormap) name tensor maps that fsr encodes over a buffer and passes
to a kernel as a `const __grid_constant__ CUtensorMap` parameter.

Tunables reach the code as `#define NAME value` lines prepended by the compiler stage.
Users write this format, proposers are asked to write it, and exports use it.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from dataclasses import replace

from fsr import dtypes, expr, tensormap
from fsr.types import Candidate, LaunchSpec, Origin, Scratch, Task, TensorMap, Tunable, size_label

HEADER_RE = re.compile(r"/\*\s*fsr\b(.*?)\*/", re.S)
GLOBAL_RE = re.compile(r"__global__\b(.*?)\b(\w+)\s*\(([^)]*)\)", re.S)
# Qualifiers with arguments that may sit between __global__ and the kernel's name.
BOUNDS_RE = re.compile(r"\b(__launch_bounds__|__maxnreg__|__cluster_dims__)\s*\((?:[^()]|\([^()]*\))*\)")
CLUSTER_RE = re.compile(r"\b__cluster_dims__\s*\(((?:[^()]|\([^()]*\))*)\)")
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
    unknown = set(data) - {"tunables", "features", "scratch", "tensormap", "launch"}
    if unknown:
        raise HeaderError(f"unknown header section(s): {', '.join(sorted(unknown))}")
    try:
        maps = tuple(tensormap.from_table(t) for t in _table_list(data, "tensormap"))
    except tensormap.MapError as e:
        raise HeaderError(str(e)) from None
    cand = Candidate(
        task=task.name, source=text,
        tunables=_tunables(data.get("tunables", {})),
        features=_tunables(data.get("features", {})),
        scratch=tuple(_scratch(s) for s in _table_list(data, "scratch")),
        tensormaps=maps,
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
    the source with matching parameter counts and kinds, and at every size the launches that run
    have their tensor maps and fit their clusters; raises HeaderError."""
    kernels = kernel_params(cand.source)
    buffers = {a.name for a in task.args} | {s.name for s in cand.scratch}
    scalars_int = set(task.size_names)
    scalars_float = {c for c, _ in task.constants}
    maps = {m.name: m for m in cand.tensormaps}
    tunables = {t.name for t in cand.tunables + cand.features}
    if len(tunables) != len(cand.tunables) + len(cand.features):
        raise HeaderError("a name is declared both as a tunable and as a feature")
    clash = tunables & (buffers | scalars_int | scalars_float)
    if clash:
        raise HeaderError(f"tunable name(s) clash with task names: {', '.join(sorted(clash))}")
    _check_map_names(cand, buffers, buffers | scalars_int | scalars_float | tunables)
    for launch in cand.launches:
        if launch.kernel not in kernels:
            found = ", ".join(sorted(kernels)) or "none"
            raise HeaderError(f"launch names kernel {launch.kernel!r}, but the source defines no "
                              f"__global__ function of that name (found: {found})")
        params = kernels[launch.kernel]
        if len(params) != len(launch.args):
            raise HeaderError(f"kernel {launch.kernel} takes {len(params)} parameters, the launch "
                              f"passes {len(launch.args)}")
        for arg, param in zip(launch.args, params, strict=True):
            _check_param(launch.kernel, arg, param, task, buffers, maps)
    clusters = kernel_clusters(cand.source)  # read from the source once, not once a size
    for size in task.test_sizes + (task.bench_size,):
        sizes = dict(size)
        running = launches_at(cand, sizes)
        scratch_counts(cand, sizes)
        if not running:
            raise HeaderError(f"no launch runs at {_label(sizes)}: every launch's `when` is false there")
        resolve_maps(cand, task, sizes, [spec for spec, _ in running])
        check_clusters(cand, running, sizes, clusters)


def _check_map_names(cand: Candidate, buffers: set[str], taken: set[str]) -> None:
    names = [m.name for m in cand.tensormaps]
    for tmap in cand.tensormaps:
        if not NAME_RE.match(tmap.name):
            raise HeaderError(f"tensormap name {tmap.name!r} is not an identifier")
        if tmap.name in taken or names.count(tmap.name) > 1:
            raise HeaderError(f"tensormap name {tmap.name!r} is declared twice or clashes with a task, scratch "
                              "or tunable name")
        if tmap.buffer not in buffers:
            raise HeaderError(f"tensormap {tmap.name}: buffer {tmap.buffer!r} is not a task or scratch buffer")


def _check_param(kernel: str, arg: str, param: str, task: Task, buffers: set[str],
                 maps: dict[str, TensorMap]) -> None:
    """One launch argument against the kernel parameter that receives it; raises HeaderError."""
    is_pointer = "*" in param or "[" in param
    if arg in maps:
        if "CUtensorMap" not in param or is_pointer or not re.search(r"\bconst\b", param) \
                or "__grid_constant__" not in param:
            raise HeaderError(f"{kernel}: {arg!r} is a tensor map, so its parameter must be "
                              f"`const __grid_constant__ CUtensorMap {arg}` (found `{param}`)")
        return
    if "CUtensorMap" in param and not is_pointer:
        raise HeaderError(f"{kernel}: parameter `{param}` takes a tensor map, but {arg!r} is no [[tensormap]]")
    if arg in buffers:
        if not is_pointer:
            raise HeaderError(f"{kernel}: {arg!r} is a buffer but its parameter is not a pointer")
    elif arg in task.size_names or arg in dict(task.constants):
        if is_pointer:
            raise HeaderError(f"{kernel}: {arg!r} is a scalar but its parameter is a pointer")
    else:
        raise HeaderError(f"{kernel}: argument {arg!r} is not a task buffer, scratch buffer, tensor map, "
                          f"size ({', '.join(task.size_names)}) or constant")


def _label(sizes: dict[str, int]) -> str:
    return size_label(tuple(sizes.items()))


def names_at(cand: Candidate, sizes: dict[str, int]) -> dict[str, int]:
    """The values expressions see at these sizes: the sizes and the candidate's defines."""
    return dict(sizes) | dict(cand.resolved_defines())


def runs_at(launch: LaunchSpec, names: dict[str, int]) -> bool:
    """Whether the launch runs at these sizes and tunables (its `when`; raises HeaderError)."""
    if not launch.when:
        return True
    try:
        return bool(expr.evaluate(launch.when, names))
    except (ValueError, ArithmeticError) as e:
        raise HeaderError(f"{launch.kernel}: when: {e}") from None


def launches_at(cand: Candidate, sizes: dict[str, int]) -> list[tuple[LaunchSpec, tuple[tuple[int, ...], tuple[int, ...], int]]]:
    """The launches that run at these sizes (their `when`), in order, each with its (grid,
    block, smem_bytes); raises HeaderError."""
    names = names_at(cand, sizes)
    running = [launch for launch in cand.launches if runs_at(launch, names)]
    return list(zip(running, _dims(running, names, sizes), strict=True))


def launch_dims(cand: Candidate, sizes: dict[str, int]) -> list[tuple[tuple[int, ...], tuple[int, ...], int]]:
    """(grid, block, smem_bytes) of each launch that runs at these sizes; raises HeaderError."""
    return [dims for _, dims in launches_at(cand, sizes)]


def _dims(launches: list[LaunchSpec], names: dict[str, int],
          sizes: dict[str, int]) -> list[tuple[tuple[int, ...], tuple[int, ...], int]]:
    out = []
    for launch in launches:
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


def resolve_maps(cand: Candidate, task: Task, sizes: dict[str, int],
                 launches: list[LaunchSpec]) -> dict[str, tensormap.Resolved]:
    """The tensor maps `launches` pass, at these sizes, each checked against the driver's rules
    and the buffer it covers; raises HeaderError with the rule a map breaks."""
    wanted = {a for launch in launches for a in launch.args}
    maps = [m for m in cand.tensormaps if m.name in wanted]
    if not maps:
        return {}
    names = names_at(cand, sizes)
    args = {a.name: a for a in task.args}
    counts = scratch_counts(cand, sizes)
    scratch = {s.name: s for s in cand.scratch}
    out = {}
    for tmap in maps:
        if tmap.buffer in scratch:
            dtype, elements = scratch[tmap.buffer].dtype, max(counts[tmap.buffer], 1)
        else:
            arg = args[tmap.buffer]
            dtype, elements = arg.dtype, math.prod(expr.evaluate_int(d, sizes) for d in arg.shape)
        try:
            out[tmap.name] = tensormap.resolve(tmap, names, dtype, elements)
        except tensormap.MapError as e:
            raise HeaderError(f"{e} at {_label(sizes)}") from None
    return out


def cluster_of(launch: LaunchSpec, source_clusters: dict[str, tuple[str, ...]],
               names: dict[str, int]) -> tuple[int, int, int] | None:
    """The launch's cluster dimensions, from its header `cluster` or its kernel's
    `__cluster_dims__` (where its arguments are numbers, sizes or tunables); None when neither
    is declared or the source's cannot be read here. Raises HeaderError."""
    declared = launch.cluster or source_clusters.get(launch.kernel)
    if not declared:
        return None
    if launch.cluster and launch.kernel in source_clusters:
        raise HeaderError(f"{launch.kernel}: the cluster is declared twice, in the header and in __cluster_dims__")
    try:
        dims = [expr.evaluate_int(d, names) for d in declared]
    except (ValueError, ArithmeticError) as e:
        if launch.cluster:
            raise HeaderError(f"{launch.kernel}: cluster: {e}") from None
        return None  # a macro fsr does not define: the device's own attribute is checked before launch
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise HeaderError(f"{launch.kernel}: cluster {dims} needs 1 to 3 dimensions of at least 1")
    return (dims + [1, 1])[0], (dims + [1, 1])[1], (dims + [1, 1])[2]


def check_clusters(cand: Candidate, running: list[tuple[LaunchSpec, tuple[tuple[int, ...], tuple[int, ...], int]]],
                   sizes: dict[str, int], clusters: dict[str, tuple[str, ...]]) -> None:
    """Every running launch's grid is a whole number of its clusters (`clusters`: kernel_clusters of
    its source); raises HeaderError."""
    names = names_at(cand, sizes)
    for launch, (grid, _, _) in running:
        cluster = cluster_of(launch, clusters, names)
        if cluster is not None and (reason := cluster_misfit(grid, cluster)):
            raise HeaderError(f"{launch.kernel} at {_label(sizes)}: {reason}")


def cluster_misfit(grid: tuple[int, ...], cluster: tuple[int, int, int]) -> str:
    """Why a grid is not a whole number of clusters ("" if it is): the launch would be refused."""
    full = tuple(grid) + (1,) * (3 - len(grid))
    if all(g % c == 0 for g, c in zip(full, cluster, strict=True)):
        return ""
    return f"grid {full} is not a whole number of {cluster} clusters (each grid dimension a multiple of the cluster's)"


def scratch_counts(cand: Candidate, sizes: dict[str, int]) -> dict[str, int]:
    """Element count of each scratch buffer at these sizes."""
    names = dict(sizes) | dict(cand.resolved_defines())
    try:
        return {s.name: expr.evaluate_int(s.count, names) for s in cand.scratch}
    except (ValueError, ArithmeticError) as e:  # ExprError; inf or NaN has no integer value
        raise HeaderError(f"scratch: {e}") from None


def kernel_params(source: str) -> dict[str, list[str]]:
    """Each `__global__` function's name and its parameter declarations as written."""
    body = BOUNDS_RE.sub(" ", HEADER_RE.sub("", strip_comments(source)))
    out: dict[str, list[str]] = {}
    for m in GLOBAL_RE.finditer(body):
        out[m.group(2)] = [" ".join(p.split()) for p in m.group(3).split(",") if p.strip() and p.strip() != "void"]
    return out


def kernel_signatures(source: str) -> dict[str, list[bool]]:
    """Each `__global__` function's name and, per parameter, whether it is a pointer."""
    return {k: ["*" in p or "[" in p for p in params] for k, params in kernel_params(source).items()}


def kernel_clusters(source: str) -> dict[str, tuple[str, ...]]:
    """The `__cluster_dims__` arguments, as written, of each kernel that has them, between
    `__global__` and its name or in the declaration just before `__global__`."""
    body = HEADER_RE.sub("", strip_comments(source))
    found: list[tuple[str, ...]] = []

    def mark(m: re.Match[str]) -> str:
        found.append(tuple(a.strip() for a in m.group(1).split(",") if a.strip()))
        return f" fsr_cluster_{len(found) - 1} "

    body = BOUNDS_RE.sub(" ", CLUSTER_RE.sub(mark, body))
    out = {}
    for m in GLOBAL_RE.finditer(body):
        before = body[:m.start()]
        declaration = before[max(before.rfind(";"), before.rfind("}")) + 1:] + m.group(1)
        if c := re.search(r"\bfsr_cluster_(\d+)\b", declaration):
            out[m.group(2)] = found[int(c.group(1))]
    return out


# One lexeme of C++ that may hold comment markers or quotes: a raw string literal, a string
# literal, a character literal (not after a digit or letter: 1'000 is a digit separator), a line
# comment, a block comment.
LEXEME_RE = re.compile(r"""R"([^()\\\s]{0,16})\((?:.|\n)*?\)\1"|"(?:\\.|[^"\\\n])*"|(?<!\w)'(?:\\.|[^'\\\n])*'"""
                       r"|//[^\n]*|/\*.*?\*/", re.S)


@functools.lru_cache(maxsize=128)  # a check strips the same source for each of its readers
def strip_comments(source: str) -> str:
    """Source without // and /* */ comments; string and character literals are kept whole (a
    `//` inside a string does not hide the rest of its line). Not a parser: enough for the header
    checks and the static guards."""
    return LEXEME_RE.sub(lambda m: " " if m.group(0)[0] == "/" else m.group(0), source)


def render(body: str, tunables: dict[str, list[int]], launches: list[dict], scratch: list[dict] | None = None,
           features: dict[str, list[int]] | None = None, tensormaps: list[dict] | None = None) -> str:
    """A `.cu` text with a header built from plain data and `body` as the code (for proposers)."""
    lines = ["/* fsr"]
    for section, table in (("tunables", tunables), ("features", features or {})):
        if table:
            lines.append(f"[{section}]")
            lines += [f"{k} = [{', '.join(str(v) for v in vals)}]" for k, vals in table.items()]
    for name, tables in (("scratch", scratch or []), ("tensormap", tensormaps or []), ("launch", launches)):
        for t in tables:
            lines += ["", f"[[{name}]]"] + [f"{k} = {_toml_value(v)}" for k, v in t.items()]
    lines.append("*/")
    return "\n".join(lines) + "\n" + body.lstrip("\n")


def launch_table(launch: LaunchSpec) -> dict[str, object]:
    """The `[[launch]]` table of a launch (`when` and `cluster` only where declared)."""
    table: dict[str, object] = {"kernel": launch.kernel, "grid": list(launch.grid), "block": list(launch.block),
                                "smem": launch.smem, "args": list(launch.args)}
    if launch.when:
        table["when"] = launch.when
    if launch.cluster:
        table["cluster"] = list(launch.cluster)
    return table


def export(cand: Candidate, defines: tuple[tuple[str, int], ...] = ()) -> str:
    """The candidate's `.cu` text with `defines` (e.g. tuned values) made the defaults: each
    tunable's chosen value moves to the front of its list, each feature is fixed to its value."""
    chosen = dict(cand.resolved_defines()) | dict(defines)
    tunables = {t.name: [chosen[t.name]] + [v for v in t.values if v != chosen[t.name]] for t in cand.tunables}
    features = {f.name: [chosen[f.name]] for f in cand.features}
    launches = [launch_table(launch) for launch in cand.launches]
    scratch = [{"name": s.name, "dtype": s.dtype, "count": s.count, "zero": s.zero} for s in cand.scratch]
    return render(HEADER_RE.sub("", cand.source, count=1), tunables, launches, scratch, features,
                  [tensormap.to_table(m) for m in cand.tensormaps])


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
    _require(table, ("kernel", "grid", "block", "args"), "launch", optional=("smem", "when", "cluster"))
    dims = {}
    for key in ("grid", "block", "cluster"):
        if key not in table:
            continue
        value = table[key]
        value = value if isinstance(value, list) else [value]
        if not 1 <= len(value) <= 3:
            raise HeaderError(f"launch {table['kernel']}: {key} needs 1 to 3 dimensions")
        dims[key] = tuple(str(v) for v in value)
    args = table["args"]
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise HeaderError(f"launch {table['kernel']}: args must be a list of names")
    when = str(table.get("when", ""))
    for d in dims["grid"] + dims["block"] + dims.get("cluster", ()) + (str(table.get("smem", "0")),) + (
            (when,) if when else ()):
        try:
            expr.names_in(d)
        except expr.ExprError as e:
            raise HeaderError(f"launch {table['kernel']}: {e}") from None
    return LaunchSpec(str(table["kernel"]), dims["grid"], dims["block"], tuple(args), str(table.get("smem", "0")),
                      when, dims.get("cluster", ()))


def _require(table: dict, keys: tuple[str, ...], what: str, optional: tuple[str, ...] = ()) -> None:
    missing = [k for k in keys if k not in table]
    if missing:
        raise HeaderError(f"[[{what}]] is missing {', '.join(missing)}")
    extra = set(table) - set(keys) - set(optional)
    if extra:
        raise HeaderError(f"[[{what}]] has unknown key(s) {', '.join(sorted(extra))}")
