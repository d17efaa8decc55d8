"""Importing fsr loads none of the heavy or remote-facing libraries.

Ray lives only in `cluster/`; CUDA (CuPy) only in the GPU child's package, `fsr.evaluate.gpu`, whose
modules run in that process alone; Optuna and the OpenAI client only where a tuning run or a
model call happens. Checked in a fresh interpreter, since this test process may have imported any
of them already. What counts as the child's side is read from the layout, not from a list.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.paths import ROOT

FORBIDDEN = ("ray", "cupy", "cupy_backends", "optuna", "openai")
# The GPU child's package: its modules run only in that process, where CUDA belongs, so they may
# import CuPy at module level. Nothing outside it may import them, or CuPy, eagerly.
GPU_SIDE = "fsr.evaluate.gpu"
# Importing fsr.__main__ runs the command line; it is fsr.cli.main, which is checked.
ENTRY_POINTS = ("fsr.__main__",)

PROBE = """
import importlib, json, pkgutil, sys
import fsr
gpu_side, entry_points = sys.argv[1], set(sys.argv[3].split(","))
names = sorted(m.name for m in pkgutil.walk_packages(fsr.__path__, "fsr."))
child = {n for n in names if n.startswith(gpu_side + ".")}
skip = child | entry_points
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
    hits = sorted(new & (set(sys.argv[2].split(",")) | child))
    if hits:
        culprits[name] = hits
print(json.dumps({"modules": names, "child": sorted(child), "failed": failed, "culprits": culprits}))
"""


def probe() -> dict:
    args = [GPU_SIDE, ",".join(FORBIDDEN), ",".join(ENTRY_POINTS)]
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


def test_the_gpu_package_holds_the_modules_that_import_cupy():
    """Every module that imports CuPy at module level lives in the GPU child's package, and the
    package holds the child's entry point; `import cupy` elsewhere in fsr/ is lazy (in a function)."""
    result = probe()
    assert f"{GPU_SIDE}.child" in result["child"]
    assert set(ENTRY_POINTS) <= set(result["modules"]), "stale entry point"
    eager = []
    for path in sorted((ROOT / "fsr").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if module.startswith(GPU_SIDE + "."):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith(("import cupy", "from cupy")):  # at column 0: module level
                eager.append(f"{module}:{number}")
    assert eager == [], f"cupy imported at module level outside {GPU_SIDE}: {eager}"


def test_fsr_testing_ships_the_contract_suites_without_importing_pytest():
    """A user's own proposer, executor or evaluator runs fsr's contract suites from the installed
    package; pytest stays a development dependency, so importing `fsr.testing` does not load it."""
    code = ("import sys, fsr.testing, fsr.testing.fakes; print('pytest' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr
    for name in ("proposer", "executor", "evaluator"):
        assert (ROOT / "fsr" / "testing" / f"{name}_contract.py").is_file()
