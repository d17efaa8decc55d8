"""What a campaign leaves in run.json for `fsr report`: its totals and, per task, the evaluations
it finished and why it stopped short of its budget (empty where it did not)."""

from __future__ import annotations

from fsr import cli, run_json


def test_a_campaign_records_each_tasks_evaluations_and_stop_note(suite, tmp_path, fake_gpu):  # noqa: F811
    runs = tmp_path / "runs"
    assert cli.main(["--tasks-dir", str(suite), "run", "softmax", "layernorm", "--runs-dir", str(runs),
                     "--max-evaluations", "4", "--tune-trials", "0", "--plain"]) == 0
    (run_dir,) = runs.iterdir()
    (campaign,) = run_json.read_run_json(run_dir)["campaigns"]
    assert set(campaign["tasks"]) == {"softmax", "layernorm"}
    assert sum(t["evaluations"] for t in campaign["tasks"].values()) == campaign["evaluations"]
    assert all(isinstance(t["note"], str) for t in campaign["tasks"].values())
