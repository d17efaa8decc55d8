"""On a real GPU, `fsr run --local` records its GPU in run.json with the ceilings its worker
measured, and `fsr prompt --run` describes that card from there, figure for figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsr import cli, run_json

pytestmark = pytest.mark.gpu


def test_a_local_run_records_its_gpu_and_the_prompt_describes_it(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    config = tmp_path / "fsr.toml"  # no comparators to wait for: this test reads the device record only
    config.write_text('[eval]\ntorch_compile = "off"\n')
    assert cli.main(["--config", str(config), "run", "softmax", "--local", "--runs-dir", str(runs),
                     "--max-evaluations", "2", "--tune-trials", "0", "--comparators-wait", "0", "--plain"]) == 0
    (run,) = runs.iterdir()
    (device,) = run_json.read_devices(run)
    assert device.sm_count > 0 and device.l2_bytes > 0 and device.arch.startswith("sm_")
    assert device.copy_gbps > 100 and device.read_gbps > 100 and device.sgemm_tflops > 1
    capsys.readouterr()
    assert cli.main(["prompt", "softmax", "--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"{device.name} ({device.arch}): {device.sm_count} SMs" in out
    assert f"copy bandwidth {device.copy_gbps:.0f} GB/s" in out and f"SGEMM rate {device.sgemm_tflops:.1f} TFLOP/s" in out
    assert "not measured" not in out and f"The GPU is {device.name} as {run} measured it." in out
