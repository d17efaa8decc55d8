"""Prompt assembly: what each section carries, deliberate truncation, the token budget."""

from __future__ import annotations

import pytest

from fsr.candidate import parse
from fsr.propose.base import ProposalRequest, Scored
from fsr.propose.features import BY_NAME, detect
from fsr.propose.prompt import build, system_prompt
from fsr.propose.render import clip
from fsr.testing.fakes import softmax_task, timing
from fsr.testing.llm_server import (
    COMPILE_ERROR_LINE,
    FAST_KERNEL,
    GOOD_KERNEL,
    WRONG_KERNEL,
    WRONG_MESSAGE,
    StandInEvaluator,
)
from fsr.types import Evaluation, Resources, SizeCheck, Verdict

TASK = softmax_task(None)
DEVICE = StandInEvaluator().device()


def scored(source: str, latency_us: float | None = None, verdict: Verdict = Verdict.OK, message: str = "",
           checks: tuple[SizeCheck, ...] = ()) -> Scored:
    cand = parse(source, TASK)
    ev = Evaluation(cand.id, TASK.name, verdict, message, checks=checks,
                    timing=timing(latency_us) if latency_us else None, baseline_us=4650.0,
                    resources=Resources(registers=22, spill_bytes=0, smem_static_bytes=128))
    return Scored(cand, ev, detect(cand))


@pytest.fixture
def baseline() -> Scored:
    return scored(TASK.baseline_source, 4650.0)


def user(request: ProposalRequest, **kw: object) -> str:
    return build(request, DEVICE, **kw).messages[1][1]  # type: ignore[arg-type]


def test_system_prompt_states_the_format_rules_and_verdicts() -> None:
    text = system_prompt()
    assert "/* fsr" in text and "[[launch]]" in text and "[tunables]" in text
    assert "device code only" in text and "cuda_fp16.h" in text
    for rule in ("host-api", "printf", "timer", "device-heap"):
        assert rule in text
    for verdict in Verdict:
        assert f"- {verdict.value}:" in text
    assert "$" not in text  # every placeholder filled


def test_user_prompt_carries_device_task_reference_and_every_size(baseline: Scored) -> None:
    text = user(ProposalRequest(TASK, (baseline,)))
    for fact in ("stand-in H200", "sm_90", "132 SMs", "48 KiB per block", "227 KiB with opt-in", "60 MiB",
                 "65536", "4140 GB/s", "50.6 TFLOP/s", "TF32 tensor-core MMA rate 317 TFLOP/s"):
        assert fact in text
    assert "`x`: float32[rows, cols], input (read-only)" in text and "`y`: float32[rows, cols], output" in text
    assert "def reference(inputs, sizes)" in text and "def library" not in text
    for size in ("rows=1,cols=1", "rows=129,cols=4099", "rows=1024,cols=8192"):
        assert size in text
    assert "timed at rows=8192,cols=8192" in text and "must be right at any other size" in text
    assert "1e-07 + 0.0001 * |expected|" in text
    assert "130 us" in text  # the copy-bandwidth floor at the bench size
    assert "4.65 ms" in text and "22 registers" in text and TASK.baseline_source.strip() in text
    assert "$" not in text


def test_a_compile_error_reaches_the_prompt_with_its_log(baseline: Scored) -> None:
    log = f"candidate.cu(41): error: {COMPILE_ERROR_LINE}\n      float inv = undefined_scale / s;\n"
    failed = scored(GOOD_KERNEL, verdict=Verdict.COMPILE_ERROR, message=log)
    text = user(ProposalRequest(TASK, (baseline,), failures=(failed,)))
    assert COMPILE_ERROR_LINE in text and "Verdict COMPILE_ERROR" in text
    assert "Attempts that failed" in text


def test_a_wrong_result_reaches_the_prompt_with_mismatches_and_the_sizes_that_passed(baseline: Scored) -> None:
    checks = (SizeCheck(TASK.test_sizes[0], True), SizeCheck(TASK.test_sizes[2], False, 2.7, "17000 of 17000 ..."))
    failed = scored(WRONG_KERNEL, verdict=Verdict.WRONG, message=WRONG_MESSAGE, checks=checks)
    text = user(ProposalRequest(TASK, (baseline,), failures=(failed,)))
    assert WRONG_MESSAGE in text and "Correct at rows=1,cols=1." in text


def test_long_compiler_logs_keep_head_and_tail_and_errors_first(baseline: Scored) -> None:
    log = "\n".join(f"candidate.cu({i}): warning: something minor number {i}" for i in range(400))
    log += f"\ncandidate.cu(999): error: {COMPILE_ERROR_LINE}\nlast line of the log"
    failed = scored(GOOD_KERNEL, verdict=Verdict.COMPILE_ERROR, message=log)
    text = user(ProposalRequest(TASK, (baseline,), failures=(failed,)))
    assert "characters cut" in text
    assert text.index(COMPILE_ERROR_LINE) < text.index("characters cut")  # the error survives the cut
    assert "last line of the log" in text


def test_clip_marks_what_it_cuts() -> None:
    text = "A" * 1000 + "B" * 1000
    out = clip(text, 200)
    assert out.startswith("A") and out.endswith("B") and "[... 1800 characters cut ...]" in out
    assert clip("short", 200) == "short"


def test_best_and_contrast_are_shown_side_by_side_with_latencies(baseline: Scored) -> None:
    best, slow = scored(FAST_KERNEL, 150.0), scored(GOOD_KERNEL, 200.0)
    text = user(ProposalRequest(TASK, (baseline,), best=best, contrast=slow))
    assert "| fastest so far" in text and "| a slower one" in text and "| kernel to improve" in text
    assert "150 us" in text and "200 us" in text and "31.00x" in text
    assert FAST_KERNEL.strip() in text and GOOD_KERNEL.strip() in text
    assert "VEC4" in text  # what the fastest has that the slower lacks


def test_features_wanted_come_with_their_catalogue_description(baseline: Scored) -> None:
    text = user(ProposalRequest(TASK, (baseline,), features_wanted=("VEC4",), features_unwanted=("UNROLL",)))
    assert f"add VEC4: {BY_NAME['VEC4'].what}" in text and "remove UNROLL" in text


def test_reply_errors_are_shown(baseline: Scored) -> None:
    text = user(ProposalRequest(TASK, (baseline,)), reply_errors=("header: launch names kernel 'k'",))
    assert "could not be used" in text and "launch names kernel 'k'" in text


def test_a_small_budget_shortens_low_priority_sections_first_and_keeps_the_parent(baseline: Scored) -> None:
    best, slow = scored(FAST_KERNEL, 150.0), scored(GOOD_KERNEL, 200.0)
    failures = tuple(scored(GOOD_KERNEL + f"\n// v{i}\n",
                            verdict=Verdict.COMPILE_ERROR, message="error: x\n" * 300) for i in range(3))
    request = ProposalRequest(TASK, (baseline,), best=best, contrast=slow, failures=failures)
    full = build(request, DEVICE, budget_tokens=100_000)
    small = build(request, DEVICE, budget_tokens=full.tokens // 2)
    assert full.shortened == () and small.shortened
    assert small.tokens <= full.tokens // 2
    assert TASK.baseline_source.strip() in small.messages[1][1]  # the kernel to improve is whole
    assert "performance" in small.shortened  # lowest priority first


def test_essentials_alone_over_budget_are_sent_rather_than_dropped(baseline: Scored) -> None:
    tiny = build(ProposalRequest(TASK, (baseline,)), DEVICE, budget_tokens=10)
    assert tiny.tokens > 10 and TASK.baseline_source.strip()[:100] in tiny.messages[1][1]


def test_a_bfloat16_task_states_its_dtype_c_type_and_floored_tolerance() -> None:
    from fsr import tasks
    from fsr.propose.prompt import task_section

    text = task_section(tasks.load("softmax_bf16"), 400)
    assert "- `x`: bfloat16[rows, cols], input (read-only) (`__nv_bfloat16`, `#include <cuda_bf16.h>`)" in text
    assert "Tolerance: |got - expected| <= 0.01 * max(|expected|, 1 * the output's mean |expected|)" in text
    assert "outputs in bfloat16" in text and "fp8 say, fails" in text
    plain = task_section(tasks.load("softmax"), 400)  # a float32 task: its own rule, no C type notes
    assert "Tolerance: |got - expected| <= 1e-07 + 0.0001 * |expected| for every element." in plain
    assert "mean |expected|" not in plain and "`float`" not in plain.split("Sizes:")[0]
