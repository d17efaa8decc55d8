"""Compiling a template's switch combinations for sm_90 with NVRTC (no GPU) and checking each
fits every launch at every size: the template tests of every task share it."""

from __future__ import annotations

import math
import os
import random
import re
from concurrent.futures import ThreadPoolExecutor

from fsr import candidate
from fsr.evaluate import guards
from fsr.evaluate.compile import Compiled, CompileFailed, CompileService
from fsr.propose.cpp import active_source
from fsr.propose.transforms import split
from fsr.types import Candidate, Task

ARCH = "sm_90"
COMPILER = CompileService()  # fsr's own templates: compiled in this process

REGS_PER_BLOCK = 65536
SMEM_PER_BLOCK = 48 * 1024  # static shared memory: what every template must stay within
SMEM_PER_BLOCK_OPTIN = 227 * 1024  # static + dynamic, the launch opting in (sm_90's most)


FEATURE_SAMPLE = 6  # random feature combinations, beyond the extremes and single switches
MIXED_SAMPLE = 4  # random combinations of every tunable and feature


def combinations(cand: Candidate, seed: int = 0, sweep: bool = True) -> list[dict[str, int]]:
    """Feature extremes, singles and a sample at default tunables; each tunable value alone with
    features off and all on (`sweep`); every tunable at its largest with each switch alone; a
    sample of whole combinations. Duplicates dropped."""
    rng = random.Random(seed)
    features, tunables = cand.features, cand.tunables
    off = {f.name: f.values[0] for f in features}
    on = {f.name: max(f.values) for f in features}
    out = [off, on]
    for f in features:
        out += [off | {f.name: max(f.values)}, on | {f.name: f.values[0]}]
    out += [{f.name: rng.choice(f.values) for f in features} for _ in range(FEATURE_SAMPLE if features else 0)]
    for t in tunables if sweep else ():
        out += [base | {t.name: v} for v in t.values for base in (off, on)]
    # every tunable at its largest (the most registers and shared memory) with each switch alone
    big = {t.name: max(t.values) for t in tunables}
    out += [off | big, on | big] + [off | big | {f.name: max(f.values)} for f in features]
    everything = features + tunables
    out += [{x.name: rng.choice(x.values) for x in everything} for _ in range(MIXED_SAMPLE)]
    unique = {tuple(sorted(d.items())): d for d in out}
    return list(unique.values())


def spills_allowed(task: str, values: dict[str, int], kernel: str) -> bool:
    """SGEMM's LAUNCH_BOUNDS caps registers at 128 (two 256-thread blocks per SM); with 32 or 64
    accumulators a thread the compiler may spill a little. SGEMM's TF32X3 at 128 accumulators a
    thread (TM 8, TN 16) holds two sets of fragments and their TF32 halves beside them: 255
    registers may not be enough. GEMV's LAUNCH_BOUNDS caps registers at 128 for 512-thread blocks,
    where 4 rows a thread with 8 loads each in flight (float4s) need more. The LEAN kernels of
    RMSNORM and LAYERNORM (`kernel` *_lean) at 1536 or 2048 threads an SM (LEAN_THREADS) have 40
    or 32 registers: a pack of 8 floats, Welford's state, or REG_ROW's held row beside the two
    passes' loops (the kernel has both), may spill a little.
    Nowhere else."""
    if task == "gemv":
        return values.get("LAUNCH_BOUNDS") == 1 and values.get("BLOCK") == 512
    if task in ("rmsnorm", "rmsnorm_bf16", "layernorm"):
        block = values.get("BLOCK", 256)
        return kernel.endswith("_lean") and block * max(1, values.get("LEAN_THREADS", 1536) // block) >= 1536
    if task != "sgemm" or values.get("REG_BLOCK") != 1:
        return False
    accumulators = values.get("TM", 8) * values.get("TN", 8)
    tensor_cores = values.get("TF32X3") == 1 and values.get("SMEM_TILE") == 1
    return (values.get("LAUNCH_BOUNDS") == 1 and accumulators >= 32) or (tensor_cores and accumulators >= 128)


def program_key(cand: Candidate, values: dict[str, int]) -> tuple[str, tuple[tuple[str, int], ...]]:
    """What the compiler sees of `cand` at `values`: its active source (fsr.propose.cpp: the
    branches off under these defines dropped, a branch on anything unknown kept), its compile
    options, and the values of the defines that text names. Two combinations with one key compile
    to one program: mostly a tunable given at its default and the same left out, and a define
    that only branches already dropped name."""
    one = candidate.with_defines(cand, values)
    defines = dict(one.resolved_defines())
    text = active_source(split(cand.source)[1], defines)  # the header names every define, read or not
    named = set(_WORD.findall(text))
    return text + "\n".join(one.compile_options), tuple(sorted((k, v) for k, v in defines.items() if k in named))


_WORD = re.compile(r"\b[A-Za-z_]\w*\b")


def compile_at(cand: Candidate, values: dict[str, int]) -> Compiled | CompileFailed:
    """`cand` compiled at `values`, or why it did not compile."""
    try:
        return COMPILER.compile(candidate.with_defines(cand, values), ARCH)
    except CompileFailed as e:
        return e


def problems(task: Task, cand: Candidate, values: dict[str, int], compiled: Compiled | CompileFailed) -> list[str]:
    """Why this combination would not compile or launch at some size; empty if it would.
    `compiled`: its program (compile_at), perhaps compiled for another combination of its key."""
    if isinstance(compiled, CompileFailed):
        return [f"{values}: compile error\n{compiled.log[:3000]}"]
    one = candidate.with_defines(cand, values)
    refused = guards.check(one) or guards.check_compiled(compiled.ptx, compiled.cubin)
    out = [f"{values}: {refused}"] if refused else []
    for name, res in compiled.kernel_resources:
        if res.spill_bytes and not spills_allowed(task.name, dict(one.resolved_defines()), name):
            out.append(f"{values}: {name} spills {res.spill_bytes} bytes")
        for size in task.test_sizes + (task.bench_size,):
            for launch, (grid, block, smem) in candidate.launches_at(one, dict(size)):  # those whose `when` holds
                if launch.kernel != name:
                    continue
                threads = math.prod(block)
                if any(g > 65535 for g in grid[1:]):
                    out.append(f"{values}: {name} grid {grid} at {size}")
                if threads > 1024 or res.registers * threads > REGS_PER_BLOCK:
                    out.append(f"{values}: {name} {threads} threads x {res.registers} registers")
                if res.smem_static_bytes > SMEM_PER_BLOCK or res.smem_static_bytes + smem > SMEM_PER_BLOCK_OPTIN:
                    out.append(f"{values}: {name} {res.smem_static_bytes} + {smem} bytes of shared memory at {size}")
    return out


def check_all(task: Task, cand: Candidate, combos: list[dict[str, int]]) -> None:
    """Every combination's problems; each distinct program (program_key) compiled once, its
    launches and guards checked for every combination that has it."""
    keys = [program_key(cand, values) for values in combos]
    first: dict[tuple[str, tuple[tuple[str, int], ...]], dict[str, int]] = {}  # each key's first combination
    for key, values in zip(keys, combos, strict=True):
        first.setdefault(key, values)
    # NVRTC releases the GIL: compiles run in parallel threads.
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 2)) as pool:
        programs = dict(zip(first, pool.map(lambda values: compile_at(cand, values), first.values()), strict=True))
    found = [p for key, values in zip(keys, combos, strict=True) for p in problems(task, cand, values, programs[key])]
    assert not found, f"{len(found)} problem(s):\n" + "\n".join(found[:10])


def extremes(template: Candidate) -> list[dict[str, int]]:
    """Every switch off and every switch on, tunables at their defaults (one if they are the same)."""
    off = {f.name: f.values[0] for f in template.features}
    on = {f.name: max(f.values) for f in template.features}
    return [off] if on == off else [off, on]


def sample(template: Candidate, seed: int, count: int) -> list[dict[str, int]]:
    """Every switch off, every switch on (tunables at their defaults), then `count` seeded whole
    combinations of switches and tunables; duplicates dropped, the first kept."""
    rng = random.Random(seed)
    out = extremes(template)
    out += [{x.name: rng.choice(x.values) for x in template.features + template.tunables} for _ in range(count)]
    return list({tuple(sorted(d.items())): d for d in out}.values())
