"""The adversarial corpus: kernels the evaluator must refuse, each with the verdict it must get.

Each file starts with `// expect: VERDICT — why`. Files live in a folder named after their task.
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXPECT = re.compile(r"^// expect: (\w+)")


def corpus() -> list[tuple[str, Path, str]]:
    """(task, path, expected verdict) for every kernel in the corpus."""
    out = []
    for path in sorted(HERE.glob("*/*.cu")):
        m = EXPECT.match(path.read_text())
        assert m, f"{path} has no '// expect: VERDICT' first line"
        out.append((path.parent.name, path, m.group(1)))
    return out
