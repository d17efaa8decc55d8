"""How things are written into a prompt: templates from `prompts/` filled in, long texts clipped
around a marker that says what was cut, figures in their units, and one kernel's evaluation in a
few lines (verdict, timing, what went wrong, resources, machine-code facts). Which of these a
prompt holds, and how it is shortened to fit its budget, is fsr.propose.prompt's business.
"""

from __future__ import annotations

import functools
import re
import string
from importlib import resources

from fsr.evaluate import diagnose
from fsr.propose.base import Scored, speedup_basis, task_speedup
from fsr.types import Evaluation, Task, Verdict, size_label

LOG_CHARS = 2400  # a compiler log or mismatch report in full feedback
LOG_CHARS_SHORT = 600
SOURCE_CHARS = 24_000  # a kernel shown whole up to this size


def clip(text: str, max_chars: int) -> str:
    """`text` if short enough, else its head and tail around a marker saying what was cut."""
    text = text.strip()
    if len(text) <= max_chars:
        return text
    head = max_chars * 3 // 5
    tail = max_chars - head
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


@functools.cache
def template(name: str) -> string.Template:
    """A prompt template from fsr/propose/prompts/ (placeholders are `$name`)."""
    return string.Template(resources.files("fsr.propose").joinpath("prompts", name).read_text())


def fill(template_name: str, **values: object) -> str:
    """A template with its placeholders replaced, stripped, ending in one newline."""
    return template(template_name).substitute({k: str(v) for k, v in values.items()}).strip() + "\n"


def describe(member: Scored, task: Task, log_chars: int = LOG_CHARS, diagnostics: bool = False) -> str:
    """One kernel's evaluation in a few lines: verdict, what went wrong or how fast, resources."""
    ev = member.evaluation
    if ev is None:
        return "Not evaluated yet."
    lines = [f"Verdict {ev.verdict}."]
    if ev.verdict == Verdict.OK and ev.timing is not None:
        t = ev.timing
        lines.append(f"Median {format_us(t.median_us)} at {size_label(task.bench_size)} (10th-90th "
                     f"percentile {format_us(t.p10_us)}-{format_us(t.p90_us)}), {t.gbps:.0f} GB/s, "
                     f"{t.ceiling_fraction:.0%} of the device's measured ceiling; "
                     f"{format_x(task_speedup(task, ev))} over {speedup_basis(task)}"
                     + (f", library {format_us(ev.library_us)}" if ev.library_us else "") + ".")
    passed = [size_label(c.size) for c in ev.checks if c.passed]
    if ev.verdict == Verdict.WRONG and passed:
        lines.append(f"Correct at {'; '.join(passed)}.")
    if ev.message:
        lines.append(_message(ev, log_chars))
    lines.append(_resources(ev, member))
    facts = diagnosed(ev) if diagnostics else ""
    if facts:
        lines.append(f"Machine code (static counts):\n{facts}")
    return "\n".join(line for line in lines if line)


def diagnosed(ev: Evaluation | None) -> str:
    """An evaluation's diagnostics, or "" where there are none to show."""
    if ev is None or not ev.diagnostics or ev.diagnostics.startswith(diagnose.UNAVAILABLE):
        return ""
    return ev.diagnostics


def _message(ev: Evaluation, log_chars: int) -> str:
    label = {Verdict.COMPILE_ERROR: "Compiler log", Verdict.WRONG: "Mismatch"}.get(ev.verdict, "Message")
    text = ev.message
    if ev.verdict == Verdict.COMPILE_ERROR:
        text = _errors_first(text)
    return f"{label}:\n```\n{clip(text, log_chars)}\n```"


_ERROR_LINE = re.compile(r"error|catastrophic", re.I)


def _errors_first(log: str) -> str:
    """A compiler log with its error lines first: when it is cut, the errors survive."""
    lines = log.strip().splitlines()
    errors = [line for line in lines if _ERROR_LINE.search(line)]
    if not errors or len(log) <= LOG_CHARS_SHORT:
        return log
    return "\n".join(errors) + "\n--- full log ---\n" + log


def _resources(ev: Evaluation, member: Scored) -> str:
    r = ev.resources
    parts = []
    if r.registers:
        parts.append(f"{r.registers} registers per thread, {r.spill_bytes} B spilled, "
                     f"{r.smem_static_bytes} B static shared memory")
    defines = ev.tuned_defines or member.candidate.resolved_defines()
    if defines:
        parts.append(("tuned to " if ev.tuned_defines else "defines ") + ", ".join(f"{k}={v}" for k, v in defines))
    return ("Resources: " + "; ".join(parts) + ".") if parts else ""


def format_bytes(n: int) -> str:
    """A size in B, KiB or MiB ("?" when unknown, i.e. 0)."""
    if not n:
        return "?"
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n} B"


def format_us(us: float | None) -> str:
    """A latency in us, or in ms from 1000 us on ("?" when unknown)."""
    if us is None:
        return "?"
    return f"{us / 1000:.3g} ms" if us >= 1000 else f"{us:.3g} us"


def format_x(speedup: float | None) -> str:
    """A speedup as a factor ("?" when unknown)."""
    return f"{speedup:.2f}x" if speedup else "?"
