"""Importing fsr loads none of the heavy or remote-facing libraries.

Ray lives only in `cluster/`; CUDA (CuPy) only in the evaluator's child process; Optuna and the
OpenAI client only where a tuning run or a model call happens. Checked in a fresh interpreter,
since this test process may have imported any of them already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("ray", "cupy", "cupy_backends", "optuna", "openai")
# The code of the evaluator's sandbox child: it runs only in that process, where CUDA belongs,
# so it imports CuPy at module level. Nothing on the driver side may import these eagerly.
CHILD_SIDE = ("fsr.evaluate.bench", "fsr.evaluate.child", "fsr.evaluate.inputs", "fsr.evaluate.tuning",
              "fsr.evaluate.verify")
# Importing fsr.__main__ runs the command line; it is fsr.cli.main, which is checked.
ENTRY_POINTS = ("fsr.__main__",)

PROBE = """
import importlib, json, pkgutil, sys
import fsr
skip = set(sys.argv[1].split(","))
names = sorted(m.name for m in pkgutil.walk_packages(fsr.__path__, "fsr."))
failed, culprits = {}, {}
for name in names:
    if name in skip:
        continue
    before = set(sys.modules)
    try:
        importlib.import_module(name)
    except Exception as e:
        failed[name] = f"{type(e).__name__}: {e}"
    new = {m.split(".")[0] for m in set(sys.modules) - before} | (set(sys.modules) - before)
    hits = sorted(new & (set(sys.argv[2].split(",")) | skip))
    if hits:
        culprits[name] = hits
print(json.dumps({"modules": names, "failed": failed, "culprits": culprits}))
"""


def probe() -> dict:
    args = [",".join(CHILD_SIDE + ENTRY_POINTS), ",".join(FORBIDDEN)]
    out = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_fsr_loads_no_ray_cuda_optuna_or_openai():
    result = probe()
    assert {"fsr.types", "fsr.config", "fsr.execute.local", "fsr.cli"} <= set(result["modules"])
    assert result["failed"] == {}, result["failed"]
    # A culprit is a module whose own import pulled in a forbidden library or child-side code.
    assert result["culprits"] == {}, f"imported at module level: {result['culprits']}"


def test_the_child_side_exemptions_name_real_modules():
    modules = set(probe()["modules"])
    assert set(CHILD_SIDE + ENTRY_POINTS) <= modules, "stale exemption: update CHILD_SIDE"
