"""One module is the seam to the `openai` client: fsr/propose/llm_client.py imports it, and the
retries and the endpoint check get what they need (fsr.propose.retry.AttemptFailed) from there.
Read from the source, where an import inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import fsr
from tests.support.paths import ROOT

PACKAGE = Path(fsr.__file__).resolve().parent
SEAM = "fsr/propose/llm_client.py"


def importers(module: str, root: Path = PACKAGE) -> set[str]:
    """The files under `root` that import `module` anywhere (top level or in a function), as
    paths from root's parent."""
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if any(n == module or n.startswith(module + ".") for n in names):
                found.add(path.relative_to(root.parent).as_posix())
    return found


def test_only_the_client_module_imports_openai() -> None:
    assert importers("openai") == {SEAM}


def test_the_check_finds_an_import_in_a_function_and_no_near_miss(tmp_path: Path) -> None:
    """The scan is no test if it cannot see a lazy import: a module whose function imports
    `openai.types` is found, and one with `from openai import OpenAI`; `openai_extra` is not."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "lazy.py").write_text("def f():\n    import openai.types\n")
    (package / "names.py").write_text("from openai import OpenAI\n")
    (package / "other.py").write_text("import openai_extra\nfrom . import lazy\n")
    assert importers("openai", package) == {"pkg/lazy.py", "pkg/names.py"}


def test_the_architecture_page_names_the_seam() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith("| `fsr/propose/`"))
    assert "`openai` in `llm_client.py` only" in row
