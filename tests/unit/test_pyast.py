"""fsr parses Python one thread at a time (fsr.pyast): CPython 3.11's AST constructor shares its
recursion-depth state between threads (python/cpython#106905)."""

from __future__ import annotations

import ast
import re

from fsr import pyast
from tests.support.paths import ROOT

DIRECT = re.compile(r"\bast\.parse\(")


def test_no_module_of_fsr_parses_python_but_through_the_lock():
    offenders = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "fsr").rglob("*.py"))
                 if p.name != "pyast.py" and DIRECT.search(p.read_text())]
    assert offenders == [], f"parse with fsr.pyast.parse: {offenders}"


def test_the_reader_of_direct_calls_finds_one():
    assert DIRECT.search("tree = ast.parse(text)") and not DIRECT.search("tree = pyast.parse(text)")


def test_a_parse_holds_the_lock_and_gives_ast_parse_s_tree(monkeypatch):
    held = []
    real = ast.parse

    def watched(*args, **kwargs):
        held.append(pyast._LOCK.locked())
        return real(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", watched)
    tree = pyast.parse("x + 1", mode="eval")
    assert held == [True] and ast.dump(tree) == ast.dump(real("x + 1", mode="eval"))
