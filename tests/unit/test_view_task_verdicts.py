"""The live view's per-task verdict text: certifications and why the failed ones failed, and the
screenings cut short or answered from an earlier judgement, each named only where it is not zero;
the counts come from the search state as its results are told."""

from __future__ import annotations

import io
from dataclasses import replace

from fsr.certification import shortcut_words
from fsr.config import SearchConfig
from fsr.search.progress import Progress, TaskProgress, task_progress
from fsr.search.state import CampaignState
from fsr.testing.fakes import softmax_task, softmax_variants, timing
from fsr.types import Evaluation, Verdict
from fsr.view import LiveView, check_kind, failed_checks_text, verdicts_text


def task(**values: object) -> TaskProgress:
    base = TaskProgress("softmax", 12, 10, 24, "c1", 20.0, 2.0, (("OK", 8), ("WRONG", 2)), (), 0)
    return replace(base, **values)  # type: ignore[arg-type]


def test_a_task_without_certifications_or_shortcuts_shows_its_verdicts_alone() -> None:
    assert verdicts_text(task()) == "OK=8 WRONG=2"
    assert verdicts_text(task(verdicts=())) == "-"


def test_failed_certifications_say_which_check_failed_counted_by_kind() -> None:
    failed = (("fresh inputs at rows=7,cols=33", 1), ("stress set logits at rows=129,cols=4099", 1),
              ("stress set logits at rows=1,cols=65537", 1), ("timing", 2))
    text = verdicts_text(task(certified=4, uncertified=failed))
    assert text == "OK=8 WRONG=2 certified=4 UNCERTIFIED=5 (stress set logits 2, timing 2, fresh inputs 1)"
    assert verdicts_text(task(certified=3)) == "OK=8 WRONG=2 certified=3"  # no failure: no UNCERTIFIED
    assert verdicts_text(task(uncertified=(("timing", 1),))) == "OK=8 WRONG=2 certified=0 UNCERTIFIED=1 (timing 1)"


def test_a_check_is_named_without_the_size_it_failed_at() -> None:
    assert check_kind("allocation slack (fresh inputs at rows=7,cols=33)") == "allocation slack"
    assert check_kind("timed runs on fresh inputs") == "timed runs on fresh inputs"
    assert check_kind("timing") == "timing"
    assert failed_checks_text((("crash", 1), ("allocation slack (stress set x at n=3)", 3))) == \
        "allocation slack 3, crash 1"


def test_screening_shortcuts_are_worded_and_zero_ones_left_out() -> None:
    assert shortcut_words(0, 0) == ""
    assert shortcut_words(12, 0) == "12 cut short"
    assert shortcut_words(0, 1) == "1 answered from an earlier judgement"
    assert shortcut_words(12, 3) == "12 cut short, 3 answered from earlier judgements"
    text = verdicts_text(task(cut_short=12, answered_from=3, uncertified=(("timing", 1),)))
    assert text.endswith("UNCERTIFIED=1 (timing 1); 12 cut short, 3 answered from earlier judgements")
    assert "cut short" not in verdicts_text(task(answered_from=2)) and "0 " not in verdicts_text(task(answered_from=2))


def test_the_live_table_shows_the_why_and_the_shortcuts() -> None:
    from rich.console import Console

    progress = Progress(60.0, 10, 10.0, 0, None, (task(certified=1, uncertified=(("timing", 2),), cut_short=4),),
                        0, 0, 0, certifications=3, uncertified=2)
    console = Console(file=io.StringIO(), width=200)
    console.print(LiveView.render(progress))
    out = console.file.getvalue()
    assert "UNCERTIFIED=2 (timing 2); 4 cut short" in out
    assert "certified 1 (2 failed)" in out


def test_the_search_state_counts_screenings_cut_short_and_answered_from_earlier() -> None:
    state = CampaignState([softmax_task()], SearchConfig(max_evaluations=10, seed=0), lambda _: ())
    results = [{}, {"cut_short": True}, {"cut_short": True}, {"answered_from": "c-earlier"}]
    for cand, extra in zip(softmax_variants(len(results)), results, strict=True):
        evaluation = Evaluation(cand.id, cand.task, Verdict.OK, timing=timing(10.0), baseline_us=40.0, **extra)
        state.tell(cand, evaluation, frozenset())
    progress = task_progress(state.tasks["softmax"], 10)
    assert (progress.cut_short, progress.answered_from) == (2, 1)
    assert verdicts_text(progress) == "OK=4; 2 cut short, 1 answered from an earlier judgement"
