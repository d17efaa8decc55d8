"""The library comparator says what it is: a task's task.toml `library` reaches run.json's
`libraries`, and the report's summary names it beside the speedup over it and where it is the
fastest comparator, and where it has no figure (cuDNN refused the benchmark size: reference.py's
library() raised) the note names it and why; a task that names none, and a run from before the
names, read "library"."""

from __future__ import annotations

from fsr.report import comparators, tables, text
from tests.support.lineage_rows import frame, row

INFO = {"libraries": {"attention_bf16": "cuDNN SDPA", "odd": 3}}


def summary():
    """attention_bf16: best 10 us, library 5 us (the fastest comparator); softmax: library 20 us,
    PyTorch eager 15 us (the fastest)."""
    rows = [row(task="attention_bf16", library_us=5.0, torch_us=8.0), row(candidate_id="b", task="softmax")]
    return tables.task_summary(frame(rows))


def test_the_names_are_read_from_run_json_and_a_bad_entry_is_dropped():
    assert comparators.library_names(INFO) == {"attention_bf16": "cuDNN SDPA"}
    assert comparators.library_names({}) == {} and comparators.library_names({"libraries": ["x"]}) == {}
    assert comparators.library_label("cuDNN SDPA") == "library (cuDNN SDPA)"
    assert comparators.library_label("") == "library"


def test_the_summary_names_a_tasks_library_where_it_leads_and_beside_its_speedup():
    named = comparators.with_library_names(summary(), INFO).set_index("task")
    assert named.loc["attention_bf16", "library_name"] == "cuDNN SDPA"
    assert named.loc["attention_bf16", "lead"] == "library (cuDNN SDPA)"
    assert named.loc["softmax", "library_name"] == "" and named.loc["softmax", "lead"] == "PyTorch eager"
    shown = text.summary_display(named.reset_index()).set_index("task")
    assert shown.loc["attention_bf16", "speedup_library"] == "0.50x (cuDNN SDPA)"
    assert shown.loc["attention_bf16", "lead_text"] == "0.50x (library (cuDNN SDPA))"
    assert shown.loc["softmax", "speedup_library"] == 2.0  # unnamed: the number, formatted as every other
    markdown = text.markdown_table(shown.reset_index(), text.summary_columns(named.reset_index()))
    assert "| 0.50x (cuDNN SDPA) |" in markdown and "| 2.00x |" in markdown


def test_a_run_from_before_the_names_reads_library():
    plain = comparators.with_library_names(summary(), {}).set_index("task")
    assert plain.loc["attention_bf16", "lead"] == "library" and plain.loc["attention_bf16", "library_name"] == ""
    assert text.summary_display(plain.reset_index()).set_index("task").loc["attention_bf16", "speedup_library"] == 0.5


def test_a_named_library_with_no_figure_is_named_as_not_timed_with_why():
    """attention_bf16's cuDNN refused the benchmark size (reference.py's library() raised): no
    library figure, PyTorch eager's is there; the note names cuDNN SDPA and says no other backend
    stands in; softmax, which names no library, keeps the general reason."""
    rows = [row(task="attention_bf16", library_us=None, torch_us=8.0),
            row(candidate_id="b", task="softmax", library_us=None, torch_us=15.0)]
    named = comparators.with_library_names(tables.task_summary(frame(rows)), INFO)
    missing = comparators.not_timed(named, INFO).set_index(["task", "column"])
    attention = missing.loc[("attention_bf16", "speedup_library")]
    assert attention["comparator"] == "library (cuDNN SDPA)"
    assert attention["reason"].startswith("cuDNN SDPA refused the benchmark size or failed there, and no other "
                                          "backend is timed in its place")
    softmax = missing.loc[("softmax", "speedup_library")]
    assert softmax["comparator"] == "library" and softmax["reason"] == comparators.WHY["library_us"]
    shown = text.summary_display(named, missing.reset_index()).set_index("task")
    assert shown.loc["attention_bf16", "speedup_library"] == text.NOT_TIMED  # no "cuDNN SDPA" figure shown
    lines = comparators.not_timed_lines(missing.reset_index(), 2)
    assert any(line.startswith("library (cuDNN SDPA), for attention_bf16: cuDNN SDPA refused") for line in lines)
