"""Taking the kernel out of model replies: fences, several blocks, prose, bare headers, cut-offs."""

from __future__ import annotations

from fsr.candidate import parse
from fsr.propose.reply import excerpt, extract
from fsr.tasks import load
from fsr.testing.llm_server import FAST_KERNEL, GOOD_KERNEL, fenced, prose_with_blocks


def test_a_single_cuda_block_with_prose_around_it_is_taken_whole() -> None:
    got = extract(fenced(GOOD_KERNEL, before="Sure! Here it is:", after="This uses warp shuffles."))
    assert got.source == GOOD_KERNEL
    assert parse(got.source, load("softmax")).launches[0].kernel == "softmax_rows"


def test_cpp_and_bare_fences_and_tildes_are_code_blocks() -> None:
    for lang in ("cpp", "c++", "", "cu"):
        assert extract(fenced(GOOD_KERNEL, lang)).source == GOOD_KERNEL
    assert extract(f"~~~cuda\n{GOOD_KERNEL}~~~\n").source == GOOD_KERNEL


def test_of_several_blocks_the_one_with_the_header_is_taken() -> None:
    got = extract(prose_with_blocks())
    assert got.source == GOOD_KERNEL


def test_of_several_blocks_with_headers_the_last_is_taken() -> None:
    text = "Old:\n" + fenced(GOOD_KERNEL) + "\nNew:\n" + fenced(FAST_KERNEL)
    assert extract(text).source == FAST_KERNEL


def test_a_bare_header_without_fences_is_taken_up_to_the_last_brace() -> None:
    got = extract("Here you go.\n" + GOOD_KERNEL + "\nThat should be faster than before.")
    assert got.source is not None
    assert got.source.startswith("/* fsr") and "faster than before" not in got.source
    assert parse(got.source, load("softmax")).launches[0].kernel == "softmax_rows"


def test_drafts_inside_a_think_block_are_ignored() -> None:
    draft = fenced(FAST_KERNEL)
    got = extract(f"<think>Let me try:\n{draft}\nNo, simpler.</think>\n" + fenced(GOOD_KERNEL))
    assert got.source == GOOD_KERNEL


def test_a_block_cut_off_at_the_token_limit_is_refused_with_the_reason() -> None:
    text = "```cuda\n" + GOOD_KERNEL[:400]
    got = extract(text, finish_reason="length")
    assert got.source is None and "cut off" in got.reason and "token limit" in got.reason


def test_a_block_whose_closing_fence_was_forgotten_is_taken() -> None:
    got = extract("```cuda\n" + GOOD_KERNEL, finish_reason="stop")
    assert got.source == GOOD_KERNEL


def test_a_reply_without_code_says_so() -> None:
    got = extract("I cannot help with that.")
    assert got.source is None and "no code" in got.reason


def test_a_code_block_without_the_header_says_the_header_is_missing() -> None:
    got = extract(fenced("__global__ void k(float* y) { y[0] = 1; }\n"))
    assert got.source is None and "/* fsr" in got.reason


def test_an_empty_reply_says_it_was_empty() -> None:
    assert "empty" in extract("").reason
    assert "empty" in extract("   \n").reason


def test_excerpt_is_one_short_line() -> None:
    text = "line one\n\nline two " + "x" * 500
    short = excerpt(text, 40)
    assert "\n" not in short and short.endswith("...") and len(short) <= 44
