"""Static guards: cheap checks on the source before any compile, and on what the compiler made
of it (the PTX and the cubin) before any GPU time.

Generated code is untrusted. Each rule names what it refuses and why; a refused candidate gets
the REJECTED verdict with that reason, which goes back to the proposer. The source rules give
the clearest messages, but source can hide what it does (a timer register named in two string
literals the compiler joins, a header function that reads a clock), so the rules that matter
are applied again to the PTX, where every special register and every call the program makes is
written out: what runs is what is checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fsr.candidate import LEXEME_RE, strip_comments
from fsr.evaluate import device_globals, ptx_text
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
         "host CUDA API calls: fsr owns memory, streams and launches, so no work escapes the timer"),
    Rule("host-main", re.compile(r"\b(int|void)\s+main\s*\("),
         "a main function: device code only"),
    Rule("kernel-launch", re.compile(r"<<<"),
         "a launch in the code: fsr makes the header's launches, on its own stream"),
    Rule("timer", re.compile(r"\bclock(64)?\s*\(|globaltimer|%clock|\bclock_t\b|\bchrono\b|get_sreg_(clock|globaltimer)"),
         "clocks or timers: a kernel could tell timed runs from checked ones"),
    Rule("sm-id", re.compile(r"%(smid|warpid)\b|get_sreg_(smid|warpid)"),
         "the SM or warp-slot id: with it a launch finds what an earlier one left in place"),
    Rule("printf", re.compile(r"\bprintf\s*\("),
         "printf: output floods the worker and distorts timing"),
    Rule("device-heap", re.compile(r"\b(malloc|free|new|delete)\s*[\(\[]|\bnew\s+\w"),
         "device-side heap allocation: slow and unbounded; use a [[scratch]] buffer"),
    Rule("host-function", re.compile(r"__host__(?!\s+__device__)(?<!__device__\s__host__)"),
         "a host-only function (__host__ __device__ is fine): device code only"),
    Rule("file-access", re.compile(r"\b(fopen|FILE\s*\*|system\s*\(|popen|fork\s*\(|exec[lv]p?\s*\()"),
         "file or process access: device code only"),
)

# Headers that hold device code only. Any other #include is refused: includes could pull in
# host code, or files from the evaluator's disk into the compiler log.
ALLOWED_INCLUDES = re.compile(
    r"^(cuda_fp16\.h|cuda_bf16\.h|cuda_fp8\.h|cooperative_groups\.h|cooperative_groups/\w+\.h|mma\.h"
    r"|cuda/(pipeline|barrier|std/\w+|ptx|annotated_ptr)|cub/[\w/]+\.cuh|cuda_pipeline\.h|cuda_awbarrier\.h)$")
INCLUDE_RE = re.compile(r"#\s*include\s*[<\"]([^>\"]+)[>\"]")


def join_strings(code: str) -> str:
    """`code` with adjacent string literals joined as the compiler joins them ("%%glob" "altimer"
    reads "%%globaltimer"), so a rule sees the text the compiler sees."""
    out: list[str] = []
    last = 0
    joining = False  # the text so far ends with a string literal's closing quote
    for m in LEXEME_RE.finditer(code):
        between, lexeme = code[last:m.start()], m.group(0)
        if joining and lexeme.startswith('"') and not between.strip():
            out[-1] = out[-1][:-1] + lexeme[1:]  # drop the closing and the opening quote
        else:
            out += [between, lexeme]
        joining = lexeme.startswith('"')
        last = m.end()
    out.append(code[last:])
    return "".join(out)


def check(cand: Candidate) -> str | None:
    """None if the candidate may be compiled, else the reason it is refused."""
    if len(cand.source.encode()) > MAX_SOURCE_BYTES:
        return f"source is larger than {MAX_SOURCE_BYTES} bytes: keeps compiles and prompts bounded"
    code = join_strings(strip_comments(cand.source))
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


# What the compiled program may not do, read from its PTX as ptxas reads it (fsr.evaluate.ptx_text:
# comments removed, strings known, so no instruction hides between comment markers in strings).
# Special registers are named there whatever the source did to hide them; every function the
# program calls that it does not define is an `.extern .func`: the driver's printf, heap and
# assert, or the device runtime's launches and allocations.
PTX_RULES = (
    Rule("timer", re.compile(r"%(globaltimer\w*|clock\w*|pm\d\w*)"),
         "reading clocks or timers (found in the compiled PTX): a kernel could tell timing runs from checking runs"),
    Rule("sm-id", re.compile(r"%(smid|warpid)\b"),
         "reading the SM or warp-slot id (found in the compiled PTX): it makes where a thread runs repeatable, "
         "so memory a launch left in that place could be found again"),
    Rule("launch-id", re.compile(r"%gridid\b"),
         "reading the grid id (found in the compiled PTX): it differs from launch to launch, so a kernel could "
         "count its launches and tell the checking runs from the timed ones"),
)
EXTERN_FUNC_RE = re.compile(r"\.extern\s+\.func\s*(?:\([^)]*\))?\s*([\w$]+)")
ALLOWED_EXTERNS = frozenset({"__assertfail"})  # assert(): a trap with a message, a CRASH
EXTERN_RULES = {"vprintf": "printf", "malloc": "device-heap", "free": "device-heap"}
UNREADABLE = ("the rules on what runs (clocks, timers, the SM id, printf, device heap, host calls) could not "
              "read the compiled program, so it is refused rather than passed unread")


def check_ptx(ptx: str) -> str | None:
    """None if the compiled program reads no timer, clock or SM id and calls nothing outside
    itself but assert, else why it is refused; a program whose PTX is missing or cannot be read
    (a string or comment never closed) is refused too."""
    if not ptx.strip():
        return f"ptx-unreadable: the compiled PTX is missing; {UNREADABLE}"
    try:
        code = ptx_text.code(ptx)
    except ptx_text.Unreadable as e:
        return f"ptx-unreadable: in the compiled PTX, {e}; {UNREADABLE}"
    for rule in PTX_RULES:
        m = rule.pattern.search(code)
        if m:
            return f"{rule.name}: '{m.group(0)}' refused: {rule.why}"
    for m in EXTERN_FUNC_RE.finditer(code):
        name = m.group(1)
        if name in ALLOWED_EXTERNS:
            continue
        rule = next(r for r in RULES if r.name == EXTERN_RULES.get(name, "host-api"))
        return f"{rule.name}: the compiled program calls '{name}' (found in the compiled PTX), refused: {rule.why}"
    return None


def check_compiled(ptx: str, cubin: bytes) -> str | None:
    """None if what the compiler made may run: its PTX passes the PTX rules and its module-scope
    variables fit the bound (read from the cubin: known before any GPU time), else why not."""
    return check_ptx(ptx) or check_module(device_globals.read(cubin))
