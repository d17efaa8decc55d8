"""The side-channel and bad-configuration corpus, without a GPU: every file parses as a candidate
of its task, gets past the static stage (header, guards) and compiles with NVRTC, except a cheat
expected REJECTED, which the guards on its compiled module refuse there; headers are well formed;
every twin is its cheat without the cheat's lines."""

from __future__ import annotations

import pytest

from fsr import candidate, tasks
from fsr.evaluate.static import static_stage

from .corpus import (
    DEFENCES,
    all_entries,
    bad_configurations,
    certification_channels,
    parse,
    side_channels,
    twin_path,
    twin_source,
)

CHEATS = side_channels()
PAIRS = CHEATS + certification_channels()
NEW = [e for e in all_entries() if e.caught_by or e.twin_of or e.fails_at]


@pytest.mark.parametrize("entry", NEW, ids=[e.name for e in NEW])
def test_compiles_as_a_candidate_of_its_task(entry, compiler):
    task = tasks.load(entry.task)
    cand = candidate.parse(entry.path.read_text(), task)
    values = [cand]
    if entry.fails_at:  # the bad configuration compiles too: it fails only when run
        values.append(candidate.with_defines(cand, {entry.fails_at[0]: entry.fails_at[1]}))
    for c in values:
        result = static_stage(c, task, "sm_90", compiler)
        if entry.expect == "REJECTED":  # refused from what it compiled to, before any GPU time
            assert result.verdict is not None and result.verdict.verdict == "REJECTED", entry.name
            continue
        assert result.verdict is None, result.verdict and f"{entry.name}: {result.verdict.verdict} {result.verdict.message[:600]}"
        assert result.compiled is not None and result.compiled.cubin


@pytest.mark.parametrize("cheat,twin", PAIRS, ids=[c.name for c, _ in PAIRS])
def test_cheat_header_names_defences_that_give_its_verdict(cheat, twin):
    assert cheat.caught_by and set(cheat.caught_by) <= set(DEFENCES), cheat.caught_by
    assert len(set(cheat.caught_by)) == len(cheat.caught_by)
    assert cheat.expect == DEFENCES[cheat.caught_by[0]].verdict, "the first defence decides the verdict"
    assert twin.expect == "OK" and twin.twin_of == cheat.path.name


@pytest.mark.parametrize("cheat,twin", PAIRS, ids=[c.name for c, _ in PAIRS])
def test_twin_is_the_cheat_without_its_cheat_lines(cheat, twin):
    assert twin.path == twin_path(cheat)
    assert twin.path.read_text() == twin_source(cheat), f"regenerate {twin.path.name} from {cheat.path.name}"
    assert twin_source(cheat) != cheat.path.read_text()
    assert "cheat" not in twin.path.read_text().split("*/", 1)[1], "a cheat line lost its marker"


def test_corpus_covers_every_class_for_three_kinds_of_task():
    tasks_of = {c.task for c, _ in CHEATS}
    assert {"sgemm", "softmax", "scan"} <= tasks_of
    for task in ("sgemm", "softmax", "scan"):
        stems = {c.path.stem for c, _ in CHEATS if c.task == task}
        for kind in ("skip_filled", "probe_", "global_", "scratch_stash", "launch_count"):
            assert any(s.startswith(kind) for s in stems), (task, kind, stems)
    assert {e.fails_at[2] for e in bad_configurations() if e.fails_at} == {"TIMEOUT", "WRONG"}


def test_header_parser_rejects_what_it_must(tmp_path):
    """A file without an expect line is an error; a caught-by line with an unknown defence parses
    but fails the header test above (checked here on a made-up file)."""
    bad = tmp_path / "softmax" / "x.cu"
    bad.parent.mkdir()
    bad.write_text("/* fsr */\n")
    with pytest.raises(AssertionError, match="expect"):
        parse(bad)
    bad.write_text("// expect: WRONG - why\n// caught-by: prayer | state-reset\n")
    entry = parse(bad)
    assert entry.caught_by == ("prayer", "state-reset") and not set(entry.caught_by) <= set(DEFENCES)
    bad.write_text("// expect: OK - why\n// twin-of: y.cu\nbody // cheat\nkept\n")
    assert parse(bad).twin_of == "y.cu"
    bad.write_text("// expect: OK - why\n// fails-at: BLOCK=1024 TIMEOUT\n")
    assert parse(bad).fails_at == ("BLOCK", 1024, "TIMEOUT")
