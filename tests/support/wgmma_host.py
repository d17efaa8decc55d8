"""The bf16 GEMM templates' WGMMA integer and epilogue code as host C++: the pieces of
tasks/gemm_bf16/template.cu that are plain C (the tile macros, wg_tile, the C section's GELU and
bias helpers, wg_store) cut from the template's own text, so that a host program compiled by g++
runs the template's code as written. The inline PTX around them (TMA, mbarriers, wgmma) is left
out; wg_store's named barrier is the only PTX kept, as __syncthreads (every emulated thread is a
consumer)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from fsr import candidate
from fsr.types import Candidate

# The macros wg_tile and wg_store use, each a one-line #define in the template.
MACROS = ("CDIV", "WG_MTE", "WG_BM", "WG_A_BYTES", "WG_B_BYTES", "WG_STAGE_BYTES", "WG_NSTAGES")
STUBS = """#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
using std::min;
#define __device__
#define __forceinline__ inline
struct Dim { unsigned x = 1, y = 1, z = 1; };
Dim blockIdx, gridDim;
"""


def body(cand: Candidate) -> str:
    """The candidate's source without its header."""
    return candidate.HEADER_RE.sub("", cand.source)


def defines(cand: Candidate, values: dict[str, int]) -> str:
    """#define lines of every tunable and switch at `values`, WGMMA on, and the task's GELU (the
    first #define GELU in the source: the task's own, else the template's default)."""
    one = candidate.with_defines(cand, values | {"WGMMA": 1})
    gelu = re.search(r"^#define GELU (\d)", body(cand), re.M)
    assert gelu, "no GELU define"
    return "".join(f"#define {k} {v}\n" for k, v in one.resolved_defines()) + f"#define GELU {gelu[1]}\n"


def macros(cand: Candidate, names: tuple[str, ...] = MACROS) -> str:
    """The template's one-line #defines of `names`, in the template's order."""
    src, out = body(cand), []
    for name in names:
        m = re.search(rf"^#define {name}\b.*$", src, re.M)
        assert m, f"#define {name} not found"
        out.append((m.start(), m[0]))
    return "\n".join(line for _, line in sorted(out)) + "\n"


def definition_span(src: str, pattern: str) -> tuple[int, int]:
    """Where the first definition matching `pattern` (its head) starts in `src`, and where its
    braced body ends."""
    m = re.search(pattern, src)
    assert m, f"{pattern} not found"
    depth = 0
    for j in range(src.index("{", m.end()), len(src)):
        depth += {"{": 1, "}": -1}.get(src[j], 0)
        if depth == 0:
            return m.start(), j + 1
    raise AssertionError(f"{pattern}: unbalanced braces")


def function(cand: Candidate, name: str) -> str:
    """The text of device function `name` (its first definition) in the candidate's source."""
    src = body(cand)
    start, end = definition_span(src, r"__device__ __forceinline__ \w+ " + name + r"\(")
    return src[start:end] + "\n"


def between(cand: Candidate, start: str, end: str) -> str:
    """The source from the line `start` begins up to (not including) the first `end` after it."""
    src = body(cand)
    i = src.index(start)
    return src[i:src.index(end, i)]


def compile_program(source: str, folder: Path, *objects: Path, name: str = "prog") -> Path:
    """`source` built by g++ in `folder`, linked with `objects`; its executable."""
    cpp, exe = folder / f"{name}.cpp", folder / name
    cpp.write_text(source)
    subprocess.run(["g++", "-O1", "-std=c++17", "-w", "-o", str(exe), str(cpp), *map(str, objects)], check=True)
    return exe
