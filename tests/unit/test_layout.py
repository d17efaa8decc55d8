"""The tests' layout: tests/unit mirrors the package, test modules import shared code from
tests/support and never from each other, and name folders through tests.support.paths, so a test
can move without breaking another."""

from __future__ import annotations

import ast

from tests.support.paths import ROOT, TESTS

UNIT = TESTS / "unit"
ROOMS = {"commands", "cluster", "evaluate", "propose", "search", "execute", "report", "kernelbench"}


def module_files(root=TESTS):
    return sorted(p for p in root.rglob("test_*.py") if "data" not in p.relative_to(TESTS).parts)


def imported_modules(path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:  # relative ones too: `from .test_x import y`
            names.add("." * node.level + node.module)
        elif isinstance(node, ast.ImportFrom):  # `from . import test_x`
            names.update("." * node.level + a.name for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_no_test_module_imports_another_test_module():
    offenders = {}
    for path in module_files():
        hits = sorted(m for m in imported_modules(path) if m.rsplit(".", 1)[-1].startswith("test_"))
        if hits:
            offenders[str(path.relative_to(ROOT))] = hits
    assert offenders == {}, f"import shared code from tests.support instead: {offenders}"


def test_the_import_reader_sees_test_modules_imported_absolutely_and_relatively(tmp_path):
    module = tmp_path / "test_m.py"
    module.write_text("from tests.unit.test_a import x\nfrom .test_b import y\nfrom . import test_c\nimport tests.support.paths\n")
    found = imported_modules(module)
    assert {"tests.unit.test_a", ".test_b", ".test_c"} <= found
    assert sorted(m for m in found if m.rsplit(".", 1)[-1].startswith("test_")) == [".test_b", ".test_c", "tests.unit.test_a"]


def test_no_test_module_finds_folders_relative_to_its_own_file():
    relative = "Path(" + "__file__)"  # spelt apart so this file does not match itself
    offenders = [str(p.relative_to(ROOT)) for p in module_files() if relative in p.read_text()]
    assert offenders == [], f"use tests.support.paths: {offenders}"


def test_each_room_of_the_package_has_its_folder_of_unit_tests():
    for room in ROOMS:
        package = (ROOT / "cluster") if room == "cluster" else (ROOT / "fsr" / room)
        assert package.is_dir(), f"stale room {room}"
        assert (UNIT / room / "__init__.py").is_file(), f"tests/unit/{room}/ is missing"
    # every folder of tests/unit is a room of the package (or the task folders or bench/)
    for folder in (p for p in UNIT.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        rel = folder.relative_to(UNIT)
        mirrors = ROOT / "fsr" / rel if rel.parts[0] not in ("cluster", "tasks", "bench") else ROOT / rel
        assert mirrors.is_dir(), f"tests/unit/{rel} mirrors nothing in the package"
