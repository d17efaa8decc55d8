"""Prompts for the language-model proposer, assembled from the templates in `prompts/`.

The system message holds what never changes (the candidate format, its rules, the verdicts, the
reply contract); the user message holds, in this order, the device, the task, the kernel to
improve with its evaluation (none in a request for a task's first kernel: the ask says to write
one from the task's description), the fastest kernels so far (performance reinforcement), another
parent, failed attempts (correctness reinforcement), replies that could not be used, the
features wanted, and the ask. Stable parts come first so that servers with prefix caching reuse
them.

Budget: tokens are estimated as characters / 4. Long texts are cut on purpose where they enter
(compiler logs keep their head and tail around a marker), then, while the prompt is over budget,
the section of lowest priority steps down to its next shorter variant (and at last to nothing).
Nothing is ever cut by accident or mid-section without a marker saying so. How each piece is
written (templates, clipping, figures, one evaluation described) is in fsr.propose.render.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fsr import dtypes, tasks
from fsr.dtypes import LOW_PRECISION, flop_ceiling
from fsr.evaluate import guards
from fsr.evaluate.compile import target_arch
from fsr.kernelbench import write
from fsr.propose.base import ProposalRequest, Scored, speedup_basis, task_speedup
from fsr.propose.features import BY_NAME
from fsr.propose.render import (
    LOG_CHARS,
    LOG_CHARS_SHORT,
    SOURCE_CHARS,
    clip,
    describe,
    diagnosed,
    fill,
    format_bytes,
    format_us,
    format_x,
)
from fsr.types import DeviceInfo, Task, size_label

CHARS_PER_TOKEN = 4
REFERENCE_CHARS = 4000


def estimate_tokens(text: str) -> int:
    """Approximate tokens of a text (characters / 4, rounded up)."""
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Section:
    """A part of the user message: variants from full to shortest ("" drops it); sections of
    lower `priority` are shortened first."""

    name: str
    priority: int
    variants: tuple[str, ...]


@dataclass(frozen=True)
class Prompt:
    """The messages sent, their estimated size, and what was shortened to fit the budget."""

    messages: tuple[tuple[str, str], ...]  # (role, content)
    tokens: int
    shortened: tuple[str, ...]

    def as_dicts(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]

    @property
    def text(self) -> str:
        return "\n\n".join(c for _, c in self.messages)


def system_prompt() -> str:
    rules = "\n".join(f"  - {r.name}: {r.why}" for r in guards.RULES)
    return fill("system.md", guard_rules=rules)


def build(request: ProposalRequest, device: DeviceInfo | None, reply_errors: tuple[str, ...] = (),
          budget_tokens: int = 16_000, diagnostics: bool = True) -> Prompt:
    """The system and user messages for a request, within `budget_tokens` where possible (the
    device, the task and the kernel to improve are never dropped). `diagnostics` (`llm.diagnostics`)
    adds each kernel's digested machine-code facts to the parent, the fastest and the slower one."""
    task, parent = request.task, (request.parents[0] if request.parents else None)
    sections = [
        Section("device", 90, (device_section(device, task),)) if device else None,
        Section("task", 80, tuple(dict.fromkeys(task_section(task, n, device, comparators(request))
                                                for n in (REFERENCE_CHARS, 1200)))),
        Section("parent", 100, (parent_section(parent, task, SOURCE_CHARS, diagnostics),
                                parent_section(parent, task, 6000, diagnostics))) if parent else None,
        performance_section(request, diagnostics),
        second_parent_section(request),
        failures_section(request.failures, task),
        reply_errors_section(reply_errors),
        features_section(request),
        Section("ask", 100, (ask_section(request),)),
    ]
    system = system_prompt()
    chosen = {s.name: 0 for s in sections if s}
    live = [s for s in sections if s is not None]
    shortened = []

    def size() -> int:
        return estimate_tokens(system) + sum(estimate_tokens(s.variants[chosen[s.name]]) for s in live)

    while size() > budget_tokens:
        steppable = [s for s in live if chosen[s.name] + 1 < len(s.variants)]
        if not steppable:
            break  # the essentials alone are over budget: sent as they are
        victim = min(steppable, key=lambda s: s.priority)
        chosen[victim.name] += 1
        shortened.append(victim.name)
    user = "\n".join(s.variants[chosen[s.name]] for s in live if s.variants[chosen[s.name]])
    return Prompt((("system", system), ("user", user)), size(), tuple(dict.fromkeys(shortened)))


# ---- sections -----------------------------------------------------------------------------------

def device_section(device: DeviceInfo, task: Task) -> str:
    return fill("device.md", name=device.name, arch=device.arch, sm_count=device.sm_count or "?",
                smem_per_block=format_bytes(device.smem_per_block),
                smem_optin=format_bytes(device.smem_per_block_optin),
                smem_per_sm=format_bytes(device.smem_per_sm), l2=format_bytes(device.l2_bytes),
                regs_per_sm=device.regs_per_sm or "?",
                copy=f"{device.copy_gbps:.0f} GB/s" if device.copy_gbps else "not measured",
                sgemm=f"{device.sgemm_tflops:.1f} TFLOP/s" if device.sgemm_tflops else "not measured",
                tensor=(f"{device.tensor_tflops:.0f} TFLOP/s (float32-accurate split TF32, three MMAs a product, "
                        "reaches a third of it)") if device.tensor_tflops else "not measured",
                low=tensor_cores(device, task)) + tensor_maps(device)


def tensor_maps(device: DeviceInfo) -> str:
    """How to ask for a tensor map, on a device with the tensor memory accelerator (sm_90 on)."""
    m = re.fullmatch(r"sm_(\d+)[af]?", device.arch)
    return "\n" + fill("tensormap.md") if m and int(m.group(1)) >= 90 else ""


# wgmma exists on sm_90a only (sm_100a's tensor cores take tcgen05 instead), which fsr compiles an
# sm_90 device's candidates for (fsr.evaluate.compile.target_arch).
WGMMA = ("wgmma.mma_async.sync.aligned.m64nNk16 (N 8 to 256 by 8, one warpgroup of 128 threads; A from "
         "registers or a shared-memory matrix descriptor, B from a descriptor; bf16/f16 in, f32 accumulate; "
         "m64nNk32 for e4m3/e5m2) with wgmma.fence, commit_group and wait_group, and fence.proxy.async after "
         "writing its shared-memory operands; setmaxnreg")


def tensor_cores(device: DeviceInfo, task: Task) -> str:
    """For a task judged in a 16- or 8-bit float: its measured tensor-core rate and the
    instructions NVRTC compiles for this device's arch (wgmma on sm_90, which fsr compiles for
    as sm_90a); "" for other tasks."""
    if task.dtype not in dtypes.LOW_PRECISION:
        return ""
    m = re.fullmatch(r"sm_(\d+)[af]?", device.arch)
    cc = int(m.group(1)) if m else 0
    rate = flop_ceiling(device, task.dtype)
    said = f" Measured {task.dtype} tensor-core GEMM rate {rate:.0f} TFLOP/s." if rate else ""
    if cc < 80:
        return said + " This arch has no bfloat16 tensor-core MMA."
    ops = ["mma.sync.aligned.m16n8k16 (bf16/f16 in, f32 accumulate)", "ldmatrix", "cp.async"]
    if cc >= 89:
        ops.insert(1, "mma.sync.aligned.m16n8k32 with e4m3/e5m2")
    if target_arch(device.arch) == "sm_90a":
        ops.insert(0, WGMMA)
    return said + f" Tensor-core instructions this arch compiles: {'; '.join(ops)}; `mma.h` (wmma) too."


def task_section(task: Task, reference_chars: int, device: DeviceInfo | None = None,
                 timed: str = "") -> str:
    """The problem: its buffers, sizes, tolerance and floors, then the built-in reference (NumPy),
    or for an imported task its module's source, once, and no line of the importer's runtime."""
    signature = "\n".join(f"- `{a.name}`: {a.dtype}[{', '.join(a.shape)}], "
                          f"{'input (read-only)' if a.intent == 'in' else 'output'}{c_type(a.dtype)}" for a in task.args)
    constants = ""
    if task.constants:
        constants = " Constants (passed as `float`): " + ", ".join(f"{k} = {v:g}" for k, v in task.constants) + "."
    common = dict(name=task.name, signature=signature, size_names=", ".join(task.size_names), constants=constants,
                  test_sizes="\n".join(f"- {size_label(s)}" for s in task.test_sizes),
                  bench_size=size_label(task.bench_size), floor="",
                  comparators=timed, tolerance=tolerance_text(task))
    if device is not None and (floor := floors(task, device)):
        common["floor"] = " " + floor
    module = imported_module(task)
    if module is not None:  # the description already holds the module's source where the import wrote it
        described = task.description if module.strip() in task.description else (
            f"{task.description}\n\nThe module's source:\n\n```python\n{module.rstrip()}\n```")
        return fill("task_module.md", description=described, **common)
    return fill("task.md", description=task.description, reference=clip(reference_source(task), reference_chars),
                **common)


def c_type(dtype: str) -> str:
    """How a kernel declares a low-precision buffer ("" for the others, whose C type is plain)."""
    if not dtypes.is_low_precision(dtype):
        return ""
    return f" (`{dtypes.C_TYPES[dtype]}`, `#include <{dtypes.HEADERS[dtype]}>`)"


def tolerance_text(task: Task) -> str:
    """The check every output element must pass, as the judge applies it (fsr.dtypes.bounds):
    with a magnitude floor, the output's dtype that gives it and why a shortcut fails."""
    if not task.floor:
        return f"|got - expected| <= {task.atol:g} + {task.rtol:g} * |expected|"
    atol = f"{task.atol:g} + " if task.atol else ""
    return (f"|got - expected| <= {atol}{task.rtol:g} * max(|expected|, {task.floor:g} * the output's mean "
            f"|expected|) (outputs in {task.dtype}, compared in float32 or wider with the float64 reference; "
            f"computing or storing in a narrower type than {task.dtype}, fp8 say, fails)")


def imported_module(task: Task) -> str | None:
    """The problem file's text of a task `fsr import` wrote, else None (a built-in task)."""
    try:
        return write.problem_text((Path(task.directory) / "reference.py").read_text())
    except OSError:
        return None


def comparators(request: ProposalRequest) -> str:
    """What PyTorch eager and torch.compile take at the benchmark size, as a sentence, where an
    evaluation in the request carries them ("" in a first round: nothing is timed yet)."""
    members = [*request.parents, request.best, request.contrast, *request.failures]
    evs = [m.evaluation for m in members if m is not None and m.evaluation is not None]
    eager = next((e.torch_us for e in evs if e.torch_us), None)
    compiled = next((e.torch_compile_us for e in evs if e.torch_compile_us), None)
    parts = [f"PyTorch eager takes {format_us(eager)}" if eager else "",
             f"torch.compile {format_us(compiled)}" if compiled else ""]
    said = " and ".join(p for p in parts if p)
    return f" There, {said}." if said else ""


def floors(task: Task, device: DeviceInfo) -> str:
    """What physics allows at the benchmark size on this device, as a sentence ("" if unknown)."""
    sizes = dict(task.bench_size)
    parts = []
    if device.copy_gbps:
        us = tasks.bytes_moved(task, sizes) / (device.copy_gbps * 1e9) * 1e6
        parts.append(f"moving its {format_bytes(int(tasks.bytes_moved(task, sizes)))} at the measured copy "
                     f"bandwidth takes {format_us(us)}")
    ceiling = flop_ceiling(device, task.dtype)
    if ceiling and tasks.flops(task, sizes):
        us = tasks.flops(task, sizes) / (ceiling * 1e12) * 1e6
        rate = f"{task.dtype} tensor-core GEMM rate" if task.dtype in LOW_PRECISION else "SGEMM rate"
        parts.append(f"its flops at the measured {rate} take {format_us(us)}")
    return ("At the benchmark size " + "; ".join(parts) + ".") if parts else ""


def parent_section(parent: Scored, task: Task, source_chars: int, diagnostics: bool = False) -> str:
    return fill("parent.md", result=describe(parent, task, diagnostics=diagnostics),
                source=clip(parent.candidate.source, source_chars))


def performance_section(request: ProposalRequest, diagnostics: bool = False) -> Section | None:
    """The fastest kernel so far and a slower correct one, side by side (performance feedback)."""
    if request.first:
        return None
    task, parent, best, contrast = request.task, request.parents[0], request.best, request.contrast
    rows = [(label, s) for label, s in (("fastest so far", best), ("a slower one", contrast),
                                        ("kernel to improve", parent)) if s is not None and s.ok]
    if not best or not best.ok or len(rows) < 2 and best.id == parent.id:
        return None
    seen: set[str] = set()
    table = [f"| kernel | median latency | speedup over {speedup_basis(task)} | of the device's ceiling | features |",
             "|---|---|---|---|---|"]
    for label, s in rows:
        if s.id in seen:
            continue
        seen.add(s.id)
        ev = s.evaluation
        assert ev is not None and ev.timing is not None
        table.append(f"| {label} ({s.id[:8]}) | {format_us(ev.timing.median_us)} | "
                     f"{format_x(task_speedup(task, ev))} | "
                     f"{ev.timing.ceiling_fraction:.0%} | {', '.join(sorted(s.features)) or '-'} |")
    text = "\n".join(table)
    if contrast is not None and contrast.ok and contrast.id != best.id:
        gained = sorted(best.features - contrast.features)
        lost = sorted(contrast.features - best.features)
        if gained or lost:
            text += (f"\n\nThe fastest has {', '.join(gained) or 'nothing'} that the slower lacks, and lacks "
                     f"{', '.join(lost) or 'nothing'} that it has.")
    for label, s in rows if diagnostics else ():
        facts = diagnosed(s.evaluation)
        if facts and s.id != parent.id:  # the parent's are with the parent
            text += f"\n\nMachine code ({label}, {s.id[:8]}), static counts:\n{facts}"
    full = text
    if best.id != parent.id:
        full += f"\n\nThe fastest so far:\n\n```cuda\n{clip(best.candidate.source, SOURCE_CHARS)}\n```"
    with_contrast = full
    if contrast is not None and contrast.ok and contrast.id not in (best.id, parent.id):
        with_contrast += f"\n\nThe slower one:\n\n```cuda\n{clip(contrast.candidate.source, SOURCE_CHARS)}\n```"
    variants = dict.fromkeys(fill("performance.md", comparison=t) for t in (with_contrast, full, text))
    return Section("performance", 50, (*variants, ""))


def second_parent_section(request: ProposalRequest) -> Section | None:
    if len(request.parents) < 2 or request.best is not None and request.parents[1].id == request.best.id:
        return None
    other = request.parents[1]
    text = (f"# Another kernel to borrow ideas from\n\n{describe(other, request.task)}\n\n"
            f"```cuda\n{clip(other.candidate.source, SOURCE_CHARS)}\n```\n")
    return Section("second parent", 20, (text, ""))


def failures_section(failures: tuple[Scored, ...], task: Task) -> Section | None:
    """Recent failed attempts, most recent first (correctness feedback)."""
    failed = [f for f in failures if f.evaluation is not None and not f.ok]
    if not failed:
        return None

    def attempts(log_chars: int, sources: int) -> str:
        parts = []
        for i, f in enumerate(failed, 1):
            part = f"## Attempt {i}: {describe(f, task, log_chars)}"
            if i <= sources:
                part += f"\n\n```cuda\n{clip(f.candidate.source, SOURCE_CHARS)}\n```"
            parts.append(part)
        return fill("failures.md", attempts="\n\n".join(parts))

    variants = (attempts(LOG_CHARS, 1), attempts(LOG_CHARS, 0), attempts(LOG_CHARS_SHORT, 0),
                attempts(160, 0))
    return Section("failures", 60, (*dict.fromkeys(variants), ""))


def reply_errors_section(errors: tuple[str, ...]) -> Section | None:
    if not errors:
        return None
    full = fill("reply_errors.md", errors="".join(f"- {clip(e, LOG_CHARS_SHORT)}\n" for e in errors))
    short = fill("reply_errors.md", errors=f"- {clip(errors[-1], 300)}\n")
    return Section("reply errors", 70, tuple(dict.fromkeys((full, short))))


def features_section(request: ProposalRequest) -> Section | None:
    lines = [f"- add {f}: {BY_NAME[f].what}" if f in BY_NAME else f"- add {f}" for f in request.features_wanted]
    lines += [f"- remove {f}: {BY_NAME[f].what} (it has not paid off here)" if f in BY_NAME
              else f"- remove {f}" for f in request.features_unwanted]
    if not lines:
        return None
    text = fill("features.md", wanted="Measurements so far suggest trying these changes:\n" + "\n".join(lines))
    return Section("features", 75, (text,))


def ask_section(request: ProposalRequest) -> str:
    if request.first:  # nothing to improve: write one (a retry sees its failed attempts above)
        return fill("first.md", focus="Earlier attempts failed (above): do not repeat their mistakes."
                    if request.failures else "")
    parent = request.parents[0]
    if parent.evaluation is not None and not parent.ok:
        focus = "It failed: first make it correct, then fast."
    elif request.features_wanted or request.features_unwanted:
        focus = "Apply the changes asked for above where they make sense for this kernel."
    else:
        focus = "Find what limits it (memory traffic, latency, occupancy, instructions) and fix that."
    return fill("ask.md", focus=focus)



def reference_source(task: Task) -> str:
    """The task's reference.py, less any library comparator (not the model's business)."""
    path = Path(task.directory) / "reference.py"
    try:
        text = path.read_text()
    except OSError:
        return "(reference not available)"
    return re.sub(r"\ndef library\(.*?(?=\ndef |\Z)", "\n", text, flags=re.S).rstrip() + "\n"
