"""Tuning-journal cost per candidate as a run's journal grows: `fsr.tune.tune` with a trivial
objective (8 trials over a 120-point space), every candidate into one journal file, timed at
the start, after 100 and after 300 candidates; then the wait for the last writes.

    python bench/journal_cost.py [--against OTHER_TUNE_PY]

`--against` times another version of fsr/tune.py the same way, e.g. an earlier commit's:
`git show 5961153:fsr/tune.py > /tmp/old_tune.py`.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from fsr import tune as current
from fsr.types import Tunable

SPACE = (Tunable("BLOCK", (32, 64, 128, 256, 512, 1024)), Tunable("ITEMS", (1, 2, 4, 8)),
         Tunable("UNROLL", (1, 2, 4, 8, 16)))


def load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("fsr._tune_other", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def measure(module: ModuleType, label: str, candidates: int = 300) -> None:
    def objective(p: dict[str, int]):
        return module.TrialOutcome(float(p["BLOCK"] * p["ITEMS"] + p["UNROLL"]), "")

    journal = str(Path(tempfile.mkdtemp()) / "optuna.journal")
    ms = []
    for i in range(candidates):
        started = time.perf_counter()
        module.tune(SPACE, objective, max_trials=8, time_budget_s=60.0, journal_path=journal, study_name=f"c{i}")
        ms.append(1000 * (time.perf_counter() - started))
    started = time.perf_counter()
    getattr(module, "flush_journals", lambda: None)()
    flush = 1000 * (time.perf_counter() - started)
    print(f"{label}: ms per candidate, candidates 1-10 {sum(ms[:10]) / 10:.1f}, 91-100 {sum(ms[90:100]) / 10:.1f}, "
          f"291-300 {sum(ms[-10:]) / 10:.1f}; final flush {flush:.0f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", help="another fsr/tune.py to time the same way")
    args = ap.parse_args()
    if args.against:
        measure(load(args.against), args.against)
    measure(current, "fsr.tune")


if __name__ == "__main__":
    main()
