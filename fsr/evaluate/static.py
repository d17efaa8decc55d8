"""The static stage of an evaluation: what can be known of a candidate without a GPU (its
header, the source guards, the compile and the guards on the compiled program), and the
toolchain's name for the lineage."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

from fsr import candidate as cfmt
from fsr.evaluate import guards
from fsr.evaluate.compile import Compiled, CompileFailed, CompileService, nvrtc_version
from fsr.types import Candidate, Evaluation, Task, Verdict


@dataclass(frozen=True)
class Static:
    """What can be known without a GPU: a verdict already, or the compiled program."""

    verdict: Evaluation | None
    compiled: Compiled | None


def static_stage(cand: Candidate, task: Task, arch: str, compiler: CompileService) -> Static:
    """Header check, guards, compile (by `compiler`) and the guards on the compiled program; a
    REJECTED/COMPILE_ERROR Evaluation or the cubin."""
    try:
        cfmt.check(cand, task)
    except cfmt.HeaderError as e:
        return Static(Evaluation(cand.id, cand.task, Verdict.REJECTED, f"header: {e}"), None)
    reason = guards.check(cand)
    if reason:
        return Static(Evaluation(cand.id, cand.task, Verdict.REJECTED, reason), None)
    try:
        compiled = compiler.compile(cand, arch)
    except CompileFailed as e:
        return Static(Evaluation(cand.id, cand.task, Verdict.COMPILE_ERROR, e.log), None)
    reason = guards.check_compiled(compiled.ptx, compiled.cubin)  # what runs, before any GPU time
    if reason:
        return Static(Evaluation(cand.id, cand.task, Verdict.REJECTED, reason), None)
    return Static(None, compiled)


def toolchain() -> str:
    try:
        cupy_version = importlib.metadata.version("cupy-cuda13x")
    except importlib.metadata.PackageNotFoundError:
        cupy_version = "?"
    return f"{nvrtc_version()}; cupy {cupy_version}"
