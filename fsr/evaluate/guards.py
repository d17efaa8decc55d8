"""Static guards: cheap checks on the source before any compile or GPU time.

Generated code is untrusted. Each rule names what it refuses and why; a refused candidate gets
the REJECTED verdict with that reason, which goes back to the proposer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fsr.candidate import strip_comments
from fsr.evaluate.device_globals import ModuleGlobals
from fsr.types import Candidate

MAX_SOURCE_BYTES = 100_000
# Module-scope __device__ variables persist between launches; fsr restores them before every
# launch sequence, and bounds them so that no results table fits: a decoupled look-back's
# tickets and flags need bytes (put per-tile flags in a zeroed [[scratch]] buffer).
MAX_MODULE_GLOBAL_BYTES = 16 * 1024


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    why: str


RULES = (
    Rule("host-api", re.compile(r"\bcuda(Malloc|Free|Memcpy|Memset|Stream|Event|DeviceSynchronize|Launch|Graph|SetDevice)\w*\s*\("),
         "host CUDA API calls: fsr owns allocation, streams and launches, so work cannot escape the timer"),
    Rule("host-main", re.compile(r"\b(int|void)\s+main\s*\("),
         "a main function: candidates are device code only"),
    Rule("kernel-launch", re.compile(r"<<<"),
         "a kernel launch inside the code: fsr launches what the header declares, on its own stream"),
    Rule("timer", re.compile(r"\bclock(64)?\s*\(|globaltimer|%clock|\bclock_t\b"),
         "reading clocks or timers: a kernel could tell timing runs from checking runs"),
    Rule("printf", re.compile(r"\bprintf\s*\("),
         "printf: output floods the worker and distorts timing"),
    Rule("device-heap", re.compile(r"\b(malloc|free|new|delete)\s*[\(\[]|\bnew\s+\w"),
         "device-side heap allocation: slow and unbounded; declare a [[scratch]] buffer instead"),
    Rule("host-function", re.compile(r"__host__(?!\s+__device__)(?<!__device__\s__host__)"),
         "a host-only function: candidates are device code only (__host__ __device__ is fine)"),
    Rule("file-access", re.compile(r"\b(fopen|FILE\s*\*|system\s*\(|popen|fork\s*\(|exec[lv]p?\s*\()"),
         "file or process access: candidates are device code only"),
)

# Headers that hold device code only. Any other #include is refused: includes could pull in
# host code, or files from the evaluator's disk into the compiler log.
ALLOWED_INCLUDES = re.compile(
    r"^(cuda_fp16\.h|cuda_bf16\.h|cuda_fp8\.h|cooperative_groups\.h|cooperative_groups/\w+\.h|mma\.h"
    r"|cuda/(pipeline|barrier|std/\w+|ptx|annotated_ptr)|cub/[\w/]+\.cuh|cuda_pipeline\.h|cuda_awbarrier\.h)$")
INCLUDE_RE = re.compile(r"#\s*include\s*[<\"]([^>\"]+)[>\"]")


def check(cand: Candidate) -> str | None:
    """None if the candidate may be compiled, else the reason it is refused."""
    if len(cand.source.encode()) > MAX_SOURCE_BYTES:
        return f"source is larger than {MAX_SOURCE_BYTES} bytes: keeps compiles and prompts bounded"
    code = strip_comments(cand.source)
    for inc in INCLUDE_RE.finditer(code):
        if not ALLOWED_INCLUDES.match(inc.group(1).strip()):
            return (f"#include <{inc.group(1)}> is not allowed: only device headers may be included "
                    "(cuda_fp16.h, cuda_bf16.h, cooperative_groups.h, mma.h, cuda/pipeline, cub/...)")
    for rule in RULES:
        m = rule.pattern.search(code)
        if m:
            return f"{rule.name}: '{m.group(0).strip()}' refused: {rule.why}"
    return None


def check_module(module: ModuleGlobals, unresettable: tuple[str, ...] = ()) -> str | None:
    """None if the compiled module's writable module-scope variables fit the bound and can be
    restored (`unresettable`: sections the loaded module gave no address for), else why not."""
    if unresettable:
        return (f"module-globals: module-scope __device__ variables in {', '.join(unresettable)} that fsr cannot "
                "locate to reset between launches; declare them at namespace scope, or use a [[scratch]] buffer")
    if module.total_bytes <= MAX_MODULE_GLOBAL_BYTES:
        return None
    names = ", ".join(module.names()[:4]) or "unnamed"
    return (f"module-globals: {module.total_bytes} bytes of module-scope __device__ variables ({names}) refused: "
            f"at most {MAX_MODULE_GLOBAL_BYTES} bytes; they persist between launches, and a kernel's working "
            "memory belongs in a [[scratch]] buffer, which fsr sizes and resets")
