"""The GPU paragraph is built from measured figures of a card a campaign ran on: a run records
each worker's GPU with its measured ceilings in run.json, `fsr prompt --run` (or `--device NAME`)
describes it from there, and without either the prompt says no GPU was measured rather than
describing an H100."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from fsr import run_json, tasks
from fsr.cli import main
from fsr.lineage import LineageError
from fsr.propose.device_text import device_section
from fsr.testing.fakes import FakeEvaluator, FakeExecutor
from fsr.types import DeviceInfo

H200 = DeviceInfo("NVIDIA H200", "sm_90", 132, 49152, 232448, 233472, 60 * 2**20, 65536, copy_gbps=4140.0,
                  sgemm_tflops=50.6, tensor_tflops=317.0, read_gbps=4310.0, half_tflops=702.0)


class OnH200(FakeEvaluator):
    def device(self) -> DeviceInfo:
        return H200


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A campaign of softmax on two fake H200 workers, through `fsr run`."""
    shutil.copytree(tasks.tasks_dir() / "softmax", tmp_path / "tasks" / "softmax")
    monkeypatch.setattr("fsr.commands.run._executor", lambda *a: FakeExecutor(OnH200(), slots=2))
    runs = tmp_path / "runs"
    assert main(["--tasks-dir", str(tmp_path / "tasks"), "run", "softmax", "--runs-dir", str(runs),
                 "--max-evaluations", "3", "--tune-trials", "0", "--plain"]) == 0
    (run_dir,) = runs.iterdir()
    return run_dir


def test_a_run_records_each_workers_gpu_with_its_measured_ceilings(run: Path) -> None:
    devices = json.loads((run / "run.json").read_text())["devices"]
    assert sorted(d["worker"] for d in devices) == ["fake0", "fake1"]
    assert all(d["name"] == "NVIDIA H200" and d["copy_gbps"] == 4140.0 and d["half_tflops"] == 702.0 for d in devices)
    assert run_json.read_devices(run) == [H200, H200]


def test_a_later_campaign_replaces_its_workers_entries(run: Path) -> None:
    run_json.record_devices(run, {"fake1": replace(H200, copy_gbps=4000.0), "gpu7": H200})
    devices = {d["worker"]: d["copy_gbps"] for d in json.loads((run / "run.json").read_text())["devices"]}
    assert devices == {"fake0": 4140.0, "fake1": 4000.0, "gpu7": 4140.0}


def test_a_damaged_device_entry_is_one_error(tmp_path: Path) -> None:
    run_json.write_run_json(tmp_path, {}, {"devices": [{"name": "NVIDIA H200", "arch": "sm_90", "copy_gbps": "fast"}]})
    with pytest.raises(LineageError, match="a device entry is not a measured GPU"):
        run_json.read_devices(tmp_path)


def test_fsr_prompt_describes_the_card_a_run_measured(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["--run", str(run)], ["--device", "h200", "--runs-dir", str(run.parent)]):
        assert main(["prompt", "softmax", *args]) == 0
        out = capsys.readouterr().out
        gpu = out.split("# The GPU", 1)[1].split("# The task", 1)[0]
        assert "NVIDIA H200 (sm_90): 132 SMs" in gpu and "copy bandwidth 4140 GB/s" in gpu
        assert "SGEMM rate 50.6 TFLOP/s" in gpu and "not measured" not in gpu and "H100" not in out
        assert f"The GPU is NVIDIA H200 as {run} measured it." in out


def test_fsr_prompt_without_a_run_says_no_gpu_was_measured(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prompt", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "# The GPU" not in out and "H100" not in out and "not measured" not in out
    assert "No GPU was measured for this prompt" in out


def test_a_device_no_run_measured_is_one_line(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prompt", "softmax", "--device", "A100", "--runs-dir", str(run.parent)]) == 2
    assert main(["prompt", "softmax", "--run", str(run), "--device", "A100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("fsr: error: --device A100: ") for line in err)
    assert "measured NVIDIA H200 only" in err[1]


def test_the_paragraph_says_only_what_was_measured() -> None:
    softmax = tasks.load("softmax")
    some = device_section(DeviceInfo("NVIDIA H100 80GB HBM3", "sm_90", copy_gbps=3020.0), softmax)
    assert "copy bandwidth 3020 GB/s" in some and "SGEMM" not in some and "not measured" not in some
    none = device_section(DeviceInfo("NVIDIA H100 80GB HBM3", "sm_90"), softmax)
    assert none.count("not measured") == 1 and "GB/s" not in none and "TFLOP/s" not in none
