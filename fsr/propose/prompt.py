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
the section of lowest priority steps down to its next shorter variant (and at last to nothing),
and the prompt records what each step left out (`Prompt.cuts`). Nothing is ever cut by accident
or mid-section without a marker saying so. How each piece is written (templates, clipping,
figures, one evaluation described) is in fsr.propose.render; the GPU paragraph in
fsr.propose.device_text; what a built-in task's reference shows in fsr.propose.reference_text;
an imported task's arguments in fsr.propose.imported.
"""

from __future__ import annotations

from dataclasses import dataclass

from fsr import dtypes
from fsr.evaluate import guards
from fsr.propose.base import ProposalRequest, Scored, speedup_basis, task_speedup
from fsr.propose.device_text import device_section, floors
from fsr.propose.features import BY_NAME
from fsr.propose.imported import STEPS, imported, signatures
from fsr.propose.imported import description as imported_description
from fsr.propose.reference_text import semantics
from fsr.propose.render import (
    LOG_CHARS,
    LOG_CHARS_SHORT,
    SOURCE_CHARS,
    clip,
    describe,
    diagnosed,
    fill,
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
    """A part of the user message: variants from full to shortest ("" drops it), each with what
    it leaves out (`cuts`, "" for the full one); sections of lower `priority` are shortened first."""

    name: str
    priority: int
    variants: tuple[str, ...]
    cuts: tuple[str, ...] = ()

    def cut(self, step: int) -> str:
        """What the variant `step` leaves out, in words."""
        if step < len(self.cuts) and self.cuts[step]:
            return self.cuts[step]
        return "dropped" if not self.variants[step] else "shortened"


def section(name: str, priority: int, variants: list[tuple[str, str]]) -> Section:
    """A Section from (text, what it leaves out) pairs, full first; a variant the same as an
    earlier one is left out (a text too short to clip, say)."""
    kept: dict[str, str] = {}
    for text, cut in variants:
        kept.setdefault(text, cut)
    return Section(name, priority, tuple(kept), tuple(kept.values()))


@dataclass(frozen=True)
class Prompt:
    """The messages sent, their estimated size, and what was shortened to fit the budget."""

    messages: tuple[tuple[str, str], ...]  # (role, content)
    tokens: int
    shortened: tuple[str, ...]  # the names of the sections shortened
    cuts: tuple[str, ...] = ()  # what each shortened section left out: "task: ..."

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
        section("task", 80, task_variants(task, device, comparators(request))),
        section("parent", 100, [(parent_section(parent, task, SOURCE_CHARS, diagnostics), ""),
                                (parent_section(parent, task, 6000, diagnostics), "its source clipped to 6,000 characters")])
        if parent else None,
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
    cuts = tuple(f"{s.name}: {s.cut(chosen[s.name])}" for s in live if chosen[s.name])
    return Prompt((("system", system), ("user", user)), size(), tuple(dict.fromkeys(shortened)), cuts)


# ---- sections -----------------------------------------------------------------------------------

def task_section(task: Task, reference_chars: int, device: DeviceInfo | None = None,
                 timed: str = "") -> str:
    """The problem: its buffers, sizes, tolerance and floors, then the built-in reference (NumPy),
    or for an imported task its module's source, once, and no line of the importer's runtime."""
    return task_variants(task, device, timed, (reference_chars,))[0][0]


def task_variants(task: Task, device: DeviceInfo | None = None, timed: str = "",
                  reference_chars: tuple[int, ...] = (REFERENCE_CHARS, 1200)) -> list[tuple[str, str]]:
    """The task's section from full to shortest, each with what it leaves out: a built-in task's
    reference clipped shorter; an imported task's arguments summarised (fsr.propose.imported)."""
    constants = ""
    if task.constants:
        constants = " Constants (passed as `float`): " + ", ".join(f"{k} = {v:g}" for k, v in task.constants) + "."
    common = dict(name=task.name, size_names=", ".join(task.size_names), constants=constants,
                  test_sizes="\n".join(f"- {size_label(s)}" for s in task.test_sizes),
                  bench_size=size_label(task.bench_size), floor="",
                  comparators=timed, tolerance=tolerance_text(task))
    if device is not None and (floor := floors(task, device)):
        common["floor"] = " " + floor
    found = imported(task)
    if found is not None:
        described = imported_description(task)  # the module's source is there where the import wrote it
        if found.source.strip() not in described:
            described += f"\n\nThe module's source:\n\n```python\n{found.source.rstrip()}\n```"
        lists = signatures(task, found.paths, c_type)
        return [(fill("task_module.md", description=described, signature=text, **common), cut)
                for text, cut in zip(lists, STEPS, strict=False)]
    signature = "\n".join(f"- `{a.name}`: {a.dtype}[{', '.join(a.shape)}], "
                          f"{'input (read-only)' if a.intent == 'in' else 'output'}{c_type(a.dtype)}" for a in task.args)
    return [(fill("task.md", description=task.description, reference=clip(reference_source(task), chars),
                  signature=signature, **common), f"the reference clipped to {chars:,} characters" if i else "")
            for i, chars in enumerate(reference_chars)]


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
    return section("performance", 50, [(fill("performance.md", comparison=with_contrast), ""),
                                       (fill("performance.md", comparison=full), "the slower kernel's source"),
                                       (fill("performance.md", comparison=text), "the kernels' sources"),
                                       ("", "dropped")])


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

    return section("failures", 60, [(attempts(LOG_CHARS, 1), ""), (attempts(LOG_CHARS, 0), "the failed source"),
                                    (attempts(LOG_CHARS_SHORT, 0), f"logs clipped to {LOG_CHARS_SHORT} characters"),
                                    (attempts(160, 0), "logs clipped to 160 characters"), ("", "dropped")])


def reply_errors_section(errors: tuple[str, ...]) -> Section | None:
    if not errors:
        return None
    full = fill("reply_errors.md", errors="".join(f"- {clip(e, LOG_CHARS_SHORT)}\n" for e in errors))
    short = fill("reply_errors.md", errors=f"- {clip(errors[-1], 300)}\n")
    return section("reply errors", 70, [(full, ""), (short, "all but the last error")])


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
    """The task's reference.py as the model sees it: `make_inputs` and `reference` with what they
    use, none of the comparators' harness (fsr.propose.reference_text)."""
    return semantics(task.reference_source) if task.reference_source.strip() else "(reference not available)"
