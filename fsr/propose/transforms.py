"""Generic source transforms: small, local rewrites that apply to any kernel, a model's included.

Each takes a candidate (and the task, for tolerances) and returns new `.cu` text, or None when
it does not apply (nothing to change, or not safe to change). They touch only the code after
the header, and they are text rewrites, not a compiler: the caller re-parses the result, and the
evaluator's compile and checks are the judge of whether a rewrite was right.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator

from fsr import expr
from fsr.candidate import GLOBAL_RE, HEADER_RE
from fsr.types import Candidate, Task

Transform = Callable[[Candidate, Task, random.Random], "tuple[str, str] | None"]

# Intrinsics have a few ulp of error (e.g. __expf: 2 + 1.16|x| ulp); below this relative
# tolerance a task asks for IEEE accuracy and fast math is not tried.
FAST_MATH_MIN_RTOL = 1e-5
FAST_MATH = {"expf": "__expf", "logf": "__logf", "sinf": "__sinf", "cosf": "__cosf", "tanf": "__tanf",
             "powf": "__powf", "exp10f": "__exp10f", "log2f": "__log2f", "log10f": "__log10f"}
_FAST_RE = re.compile(r"(?<![\w.])(" + "|".join(FAST_MATH) + r")\s*\(")
# Types __ldg has overloads for.
LDG_TYPES = ("float", "double", "int", "unsigned", "unsigned int", "float2", "float4", "int2", "int4",
             "double2", "uint2", "uint4", "long long", "char", "short")
_CONST_PTR = re.compile(r"\bconst\s+(" + "|".join(t.replace(" ", r"\s+") for t in LDG_TYPES) +
                        r")\s*\*\s*(?:const\s+)?(?:__restrict__\s+)?(\w+)")
_FOR_LINE = re.compile(r"^([ \t]*)for\s*\(")
_SIMPLE_BOUND = re.compile(r"^[\w\s*+()-]+$")
_INDEXED_WRITE = re.compile(r"(?<![\w.])(\w+)\s*\[[^\[\]]*\]\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)")


def split(source: str) -> tuple[str, str]:
    """(header, body): the `/* fsr ... */` header and everything after it."""
    m = HEADER_RE.search(source)
    end = m.end() if m else 0
    return source[:end], source[end:]


def add_restrict(cand: Candidate, task: Task, rng: random.Random) -> tuple[str, str] | None:
    """`__restrict__` on every pointer parameter of every kernel, when no launch passes the same
    buffer twice (restrict promises the pointers do not alias)."""
    if any(len(set(launch.args)) != len(launch.args) for launch in cand.launches):
        return None
    header, body = split(cand.source)

    def params(m: re.Match[str]) -> str:
        out = []
        for p in m.group(3).split(","):
            head, star, name = p.rpartition("*")
            # Only `T* name`: anything else after the star may be a macro qualifier already.
            if star and "__restrict__" not in p and re.fullmatch(r"\s*\w+\s*", name):
                p = f"{head}* __restrict__ {name.strip()}"
            out.append(p)
        return m.group(0)[: m.start(3) - m.start(0)] + ",".join(out) + ")"

    new = GLOBAL_RE.sub(params, body)
    return (header + new, "restrict") if new != body else None


def add_unroll(cand: Candidate, task: Task, rng: random.Random) -> tuple[str, str] | None:
    """`#pragma unroll N` before one `for` loop that has no pragma yet (N in 2, 4, 8, or full)."""
    header, body = split(cand.source)
    lines = body.split("\n")
    spots = [i for i, line in enumerate(lines) if _FOR_LINE.match(line)
             and not (i > 0 and lines[i - 1].strip().startswith("#"))
             and not (i > 0 and lines[i - 1].rstrip().endswith("\\"))]
    if not spots:
        return None
    i = rng.choice(spots)
    factor = rng.choice(("2", "4", "8", ""))
    indent = _FOR_LINE.match(lines[i]).group(1)  # type: ignore[union-attr]
    lines.insert(i, f"{indent}#pragma unroll {factor}".rstrip())
    return header + "\n".join(lines), f"unroll {factor or 'full'} at line {i + 1}"


_MACRO_WORD = re.compile(r"\b[A-Z_][A-Z0-9_]*\b")  # an all-capitals word: a macro


def add_launch_bounds(cand: Candidate, task: Task, rng: random.Random) -> tuple[str, str] | None:
    """`__launch_bounds__(threads)` on kernels whose block size is a product of tunables (the
    bound is then exact for every tuned value, since tunables arrive as #defines)."""
    tunables = {t.name for t in cand.tunables + cand.features}
    bounds: dict[str, set[str]] = {}
    for launch in cand.launches:
        dims = launch.block
        if not all(_SIMPLE_BOUND.match(d) and expr.names_in(d) <= tunables for d in dims):
            return None
        bounds.setdefault(launch.kernel, set()).add("*".join(f"({d})" for d in dims))
    header, body = split(cand.source)
    out, last = [], 0
    for m in GLOBAL_RE.finditer(body):
        threads = bounds.get(m.group(2))
        declaration = re.split(r"[;}]", body[:m.start()])[-1] + m.group(1)
        # A register cap (`__maxnreg__`, which nvcc refuses beside `__launch_bounds__`), or a
        # macro between `__global__` and the name that may expand to one (the WGMMA kernels'
        # WG_BOUNDS), rules the bound out.
        capped = "__maxnreg__" in declaration or _MACRO_WORD.search(m.group(1)) is not None
        if threads and len(threads) == 1 and "__launch_bounds__" not in declaration and not capped:
            # Before __global__: fsr.candidate's kernel regex takes the first name followed by
            # "(" after __global__ as the kernel's, so the attribute may not sit there.
            out += [body[last:m.start()], f"__launch_bounds__({next(iter(threads))}) "]
            last = m.start()
    new = "".join(out) + body[last:]
    return (header + new, "launch_bounds") if new != body else None


def use_fast_math(cand: Candidate, task: Task, rng: random.Random) -> tuple[str, str] | None:
    """Single-precision libm calls to their hardware intrinsics (expf -> __expf, ...), when the
    task's relative tolerance allows a few ulp of error."""
    if task.rtol < FAST_MATH_MIN_RTOL:
        return None
    header, body = split(cand.source)
    new = _FAST_RE.sub(lambda m: FAST_MATH[m.group(1)] + "(", body)
    return (header + new, "fast_math intrinsics") if new != body else None


def use_ldg(cand: Candidate, task: Task, rng: random.Random) -> tuple[str, str] | None:
    """Reads `p[i]` through `__ldg(&p[i])` inside kernels, for const pointers known to point to
    global memory: a kernel's pointer parameters, and const pointers declared in the kernel from
    those alone (`const float* row = x + r * cols;`), of types __ldg supports; where the index
    has no nested brackets and the element's address is not taken. __ldg reads global memory
    only: a pointer to shared or local memory read through it faults (cudaErrorInvalidAddressSpace),
    so device functions, whose pointer parameters may point anywhere, and pointers derived from
    anything else are left alone. A name that is written anywhere (`p[i] = ...`: another
    kernel's non-const parameter of the same name) is left alone too."""
    header, body = split(cand.source)
    unsafe = _written(body) | _typedefs(body)
    out, last = [], 0
    for start, end, names in _kernel_globals(body):
        names -= unsafe
        if not names:
            continue
        pattern = re.compile(r"(?<![&\w.>])(" + "|".join(sorted(names)) + r")\s*\[([^\[\]]+)\]")
        out += [body[last:start], pattern.sub(lambda m: f"__ldg(&{m.group(1)}[{m.group(2)}])", body[start:end])]
        last = end
    new = "".join(out) + body[last:]
    return (header + new, "ldg") if new != body else None


_PTR_PARAM = re.compile(r"\*\s*(?:const\s+)?(?:__restrict__\s+)?(\w+)\s*$")
_DECL_INIT = re.compile(r"\s*=\s*([^;]*);")
_MUTABLE_PTR_DECL = re.compile(r"(?<!const )\b(?!const\b)\w+\s*\*\s*(?:__restrict__\s+)?([A-Za-z_]\w*)\s*=(?!=)")


def _kernel_globals(body: str) -> list[tuple[int, int, set[str]]]:
    """Each kernel's body span and its const pointers to global memory (see use_ldg): the
    kernel's const pointer parameters, then in order each const pointer declared in the body
    whose initializer names a kernel pointer parameter (const or not) or such a pointer declared
    before, and no shared or local array of the kernel nor a pointer dropped before; a name also
    declared otherwise in the kernel (const or not) is dropped."""
    spans = []
    for m, open_at, close_at in kernel_spans(body):
        params = [p for p in m.group(3).split(",") if "*" in p]
        pointers = {pm.group(1) for p in params if (pm := _PTR_PARAM.search(p))}
        readable = {cm.group(2) for p in params if (cm := _CONST_PTR.search(p))}
        dropped: set[str] = set()
        kernel = body[open_at:close_at]
        local = _local_memory(kernel)
        for decl in _CONST_PTR.finditer(kernel):
            name, init = decl.group(2), _DECL_INIT.match(kernel, decl.end())
            words = set(re.findall(r"[A-Za-z_]\w*", init.group(1))) if init else set()
            if words & pointers and not words & (local | dropped):
                pointers.add(name)
                readable.add(name)
            else:
                dropped.add(name)
        dropped |= set(_MUTABLE_PTR_DECL.findall(kernel))  # `float* x = tile;` in an inner block
        spans.append((open_at, close_at, readable - dropped))
    return spans


_ARRAY_TYPES = r"(?:float|double|int|unsigned|char|short|long|bool|half|float2|float4|int2|int4|uint2|uint4|double2|\w+_t)"
_LOCAL_ARRAY = re.compile(r"\b" + _ARRAY_TYPES + r"\s+([A-Za-z_]\w*)\s*\[")
_SHARED = re.compile(r"__shared__[^;]*?([A-Za-z_]\w*)\s*\[")


def _local_memory(kernel: str) -> set[str]:
    """Names a kernel body declares as shared or local arrays."""
    return set(_SHARED.findall(kernel)) | set(_LOCAL_ARRAY.findall(kernel))


def kernel_spans(body: str) -> Iterator[tuple[re.Match[str], int, int]]:
    """Each kernel defined in `body`: its GLOBAL_RE match and its body's span, braces included,
    by brace matching. Declarations without a body, and a body never closed, are skipped."""
    for m in GLOBAL_RE.finditer(body):
        open_at = body.find("{", m.end())
        if open_at < 0 or ";" in body[m.end():open_at]:
            continue  # a declaration, not a definition
        depth = 0
        for i in range(open_at, len(body)):
            depth += {"{": 1, "}": -1}.get(body[i], 0)
            if depth == 0:
                yield m, open_at, i + 1
                break


_TYPEDEF = re.compile(r"typedef[^;{}]*?(\w+)\s*(?:\[[^;]*)?;")


def _typedefs(body: str) -> set[str]:
    """Type names declared by `typedef` (`typedef const float* Rows[4];` names a type, not a
    pointer that could be read through __ldg)."""
    return {m.group(1) for m in _TYPEDEF.finditer(body)}


def _written(body: str) -> set[str]:
    """Names assigned through an index somewhere in `body`: `p[i] = `, `p[i] += `, ..."""
    return set(_INDEXED_WRITE.findall(body))


# Transforms by the catalogue feature they add.
BY_FEATURE: dict[str, tuple[Transform, ...]] = {
    "READONLY": (add_restrict, use_ldg),
    "UNROLL": (add_unroll,),
    "LAUNCH_BOUNDS": (add_launch_bounds,),
    "FAST_MATH": (use_fast_math,),
}
ALL: tuple[Transform, ...] = (add_restrict, use_ldg, add_unroll, add_launch_bounds, use_fast_math)
RANDOM: frozenset[Transform] = frozenset({add_unroll})  # the rest give one result per candidate and task
