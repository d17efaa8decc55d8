"""Every relative link in the docs reaches a file, and every anchor a heading of it.

The benchmark notes moved from BENCHMARKS.md to docs/benchmarks/; a link left at a section that
moved would still render, and lead nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text: str) -> list[str]:
    """The lines of a markdown text outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a markdown text, repeats numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(text):
        heading = re.match(r"#{1,6} (.*)", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    """The relative links of a page whose file or heading does not exist."""
    broken = []
    for line in prose_lines(page.read_text()):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                broken.append(f"{target}: no such heading")
    return broken


def doc_pages(root: Path) -> list[Path]:
    return [root / "README.md", root / "BENCHMARKS.md", root / "tasks" / "README.md",
            *sorted((root / "docs").rglob("*.md"))]


def test_every_relative_link_of_the_docs_reaches_its_file_and_heading(pytestconfig: pytest.Config) -> None:
    root = pytestconfig.rootpath
    broken = {str(page.relative_to(root)): found for page in doc_pages(root) if (found := broken_links(page))}
    assert broken == {}


def test_a_link_to_a_moved_section_or_a_missing_file_is_found(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# Notes\n\n## The flush (2026-11-23, 23:20 UTC)\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](notes.md#the-flush-2026-11-23-2320-utc) [here](#top) [web](https://x.org/a#b)\n"
                    "# Top\n[moved](notes.md#the-suite) [gone](old.md)\n```\n[code](nowhere.md)\n```\n")
    assert broken_links(page) == ["notes.md#the-suite: no such heading", "old.md: no such file"]


def test_the_benchmarks_page_stays_a_page_of_today_s_figures(pytestconfig: pytest.Config) -> None:
    """BENCHMARKS.md holds the newest figure of each kind per card; the dated notes go to docs/benchmarks/."""
    lines = (pytestconfig.rootpath / "BENCHMARKS.md").read_text().splitlines()
    assert len(lines) <= 200
