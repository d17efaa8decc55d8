"""bench/scale.py runs the gate's 16 float32 tasks unless its extra arguments name tasks."""

from __future__ import annotations

import importlib.util

from fsr import tasks
from tests.support.paths import ROOT

SCRIPT = ROOT / "bench" / "scale.py"


def load():
    spec = importlib.util.spec_from_file_location("bench_scale", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gate_suite_is_the_16_float32_tasks_unless_tasks_are_named():
    scale = load()
    assert len(scale.GATE_TASKS) == 16
    assert all(tasks.load(name).dtype == "float32" or name in ("histogram", "scan") for name in scale.GATE_TASKS)
    assert not scale.names_tasks([]) and not scale.names_tasks(["--max-wall", "180", "--local"])
    assert not scale.names_tasks(["--max-wall=180", "--plain"])
    assert scale.names_tasks(["softmax"]) and scale.names_tasks(["--max-wall", "180", "gemm_bf16"])
