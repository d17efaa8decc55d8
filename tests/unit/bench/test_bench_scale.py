"""bench/scale.py runs the gate's 16 float32 tasks unless its extra arguments name tasks."""

from __future__ import annotations

import importlib.util

import pytest

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


def test_the_cold_start_line_reads_when_the_campaign_got_going(tmp_path, monkeypatch, capsys):
    """Seconds from the command's start: the worker's "ready" line in the cluster log, the first
    evaluation, every task's first, the 20th, 100th and last (certifications not counted), and the
    rate after the 100th."""
    import time

    import pandas as pd

    from fsr import lineage

    scale = load()
    started = 1_800_000_000.0
    at = [30.0 + i for i in range(120)]  # one a second from 30 s
    rows = [{"task": "gemv" if i % 2 else "softmax", "tier": None, "finished_at": t} for i, t in enumerate(at)]
    rows.append({"task": "sgemm", "tier": "certify", "finished_at": 5.0})  # a certification: no evaluation
    rows.append({"task": "sgemm", "tier": "screen", "finished_at": 200.0})
    frame = pd.DataFrame(rows)
    frame["finished_at"] = pd.to_datetime(started + frame["finished_at"], unit="s", utc=True).astype("datetime64[us, UTC]")
    monkeypatch.setattr(lineage, "read_pandas", lambda run_dir: frame)
    ready = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started + 21))
    (tmp_path / "cluster.log").write_text(f"{ready},875\tINFO supervise.py:89 -- worker w00@10.0.0.1/gpu0 ready on "
                                          "NVIDIA H200 after 9.0 s\n")
    marks = scale.cold_start("t", tmp_path, started, 210.0)
    assert abs(marks["ready_s"]["w00@10.0.0.1/gpu0"] - 21.875) < 1e-3
    assert marks["first_s"] == 30.0 and marks["every_task_s"] == 200.0
    assert marks["20th_s"] == 49.0 and marks["100th_s"] == 129.0 and marks["last_s"] == 200.0 and marks["end_s"] == 210.0
    assert abs(marks["per_minute_after_100"] - 21 / 71 * 60) < 1e-9
    out = capsys.readouterr().out
    assert "w00@10.0.0.1/gpu0 ready 21.9 s" in out and "first 30.0 s" in out and "100th 129.0 s" in out


def test_every_gate_gets_empty_library_caches_of_its_own(tmp_path):
    scale = load()
    first, second = (scale.cold_env(tmp_path / name, "0", ROOT) for name in ("a", "b"))
    for variable in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUPY_CACHE_DIR", "CUDA_CACHE_PATH"):
        assert first[variable] != second[variable]
        for env, name in ((first, "a"), (second, "b")):
            folder = tmp_path / name / "caches"
            assert env[variable].startswith(str(folder)) and not any((tmp_path / name / "caches").rglob("*.*"))
    assert first["CUDA_VISIBLE_DEVICES"] == "0" and first["PYTHONPATH"].startswith(str(ROOT))


def test_the_certifications_line_names_each_failure_by_task_and_check(capsys):
    """What the gate's certifications cost and which failed, with the check the lineage names:
    a gate whose certifications fail says which, not only how many; none certified, no line."""
    import pandas as pd

    scale = load()
    every = pd.DataFrame([
        {"task": "softmax", "tier": "screen", "certified": None, "failed_check": None, "verdict": "OK",
         "wall_s": 0.5, "setup_s": 0.0},
        {"task": "softmax", "tier": "certify", "certified": True, "failed_check": None, "verdict": "OK",
         "wall_s": 2.0, "setup_s": 1.5},
        {"task": "softmax", "tier": "certify", "certified": False, "failed_check": "timing", "verdict": "UNCERTIFIED",
         "wall_s": 1.0, "setup_s": 0.2},
        {"task": "layernorm", "tier": "certify", "certified": False,
         "failed_check": "stress set offset rows at rows=64,cols=8192", "verdict": "UNCERTIFIED",
         "wall_s": 3.0, "setup_s": 0.3},
        {"task": "layernorm", "tier": "certify", "certified": False, "failed_check": "timing", "verdict": "UNCERTIFIED",
         "wall_s": 1.0, "setup_s": 0.0},
    ])
    figures = scale.certifications("t", every)
    out = capsys.readouterr().out
    assert "4 charged 7 s, 2 s of it waiting" in out and "median 1.50 s" in out
    assert "softmax: timing (1)" in out and "stress set offset rows at rows=64,cols=8192 (1)" in out
    assert set(figures["failed"]) == {"layernorm", "softmax"} and figures["failed"]["softmax"] == "timing (1)"
    assert sorted(figures["failed"]["layernorm"].split("; ")) == [
        "stress set offset rows at rows=64,cols=8192 (1)", "timing (1)"]
    assert scale.certifications("t", every[every["tier"] == "screen"]) == {} and capsys.readouterr().out == ""


def test_the_certifications_line_says_how_far_each_best_held_when_certified(capsys):
    """Each task's best as its certification timed it, over its screened median: the table's
    figure is the least of many screenings; certification times the kernel once more."""
    import pandas as pd

    scale = load()
    screened = [("softmax", "a", 10.0), ("softmax", "b", 9.0), ("gelu", "g", 20.0), ("scan", "s", 30.0)]
    every = pd.DataFrame(
        [{"task": t, "candidate_id": c, "tier": "screen", "certified": None, "certifies": None, "failed_check": None,
          "verdict": "OK", "median_us": us, "wall_s": 0.5, "setup_s": 0.0} for t, c, us in screened]
        + [{"task": t, "candidate_id": c + "!", "tier": "certify", "certified": ok, "certifies": c,
            "failed_check": None if ok else "timing", "verdict": "OK" if ok else "UNCERTIFIED", "median_us": us,
            "wall_s": 1.0, "setup_s": 0.0}
           for t, c, us, ok in [("softmax", "a", 10.1, True), ("softmax", "b", 9.9, False), ("gelu", "g", 20.6, True)]])
    figures = scale.certifications("t", every)
    assert figures["certified_over_screened"] == pytest.approx({"softmax": 1.01, "gelu": 1.03})  # b failed: a counts
    out = capsys.readouterr().out
    assert "the bests as certified over their screened medians: median 1.020, from 1.010 to 1.030 (gelu), 2 tasks" in out
    assert "fresh inputs over the screening's sets" not in out and figures["fresh_over_screening_sets"] == {}
    # with the certifications' controls (a lineage since control_us): each one's fresh median over it
    every["control_us"] = [None] * 4 + [10.0, None, 20.0]
    figures = scale.certifications("t", every)
    assert figures["fresh_over_screening_sets"] == pytest.approx({"a!": 1.01, "g!": 1.03})
    assert "fresh inputs over the screening's sets, timed in the same load: median 1.020, from 1.010 to 1.030 (gelu), " \
        "2 certifications" in capsys.readouterr().out
