"""device_globals.spans: what a restore of a module's variables writes, from the addresses the
driver gave (shared by the GPU child's Program and exported modules)."""

from __future__ import annotations

from fsr.evaluate.device_globals import Section, Symbol, spans

A, B, HIDDEN = Symbol("a", 0, 4), Symbol("b", 8, 16), Symbol("hidden", 4, 4)
SECTION = Section(".nv.global", 32, None, (A, HIDDEN, B))


def test_a_section_the_loader_kept_whole_is_restored_whole_hidden_variables_included():
    assert spans(SECTION, [(A, 1000), (B, 1008)]) == [(1000, 0, 32)]


def test_variables_placed_apart_are_restored_one_by_one():
    assert spans(SECTION, [(A, 1000), (B, 5000)]) == [(1000, 0, 4), (5000, 8, 16)]


def test_a_section_no_variable_of_which_was_placed_has_nothing_to_restore():
    assert spans(SECTION, []) == []
