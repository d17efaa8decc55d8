"""`fsr report` end to end on synthetic run directories: the three formats, comparisons, runs
in progress, bad input, and the page's size and build time on a large lineage."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from fsr import cli, run_json
from fsr.report.page import plotly_js
from tests.support.lineage_rows import small_run, synthetic_rows, synthetic_trials, write_run
from tests.support.paths import ROOT as REPO


def test_html_page_is_written_into_the_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = small_run(tmp_path / "r1")
    assert cli.main(["report", str(run)]) == 0
    page = run / "report.html"
    assert capsys.readouterr().out.strip() == str(page)
    text = page.read_text()
    assert text.count(plotly_js()[:200]) == 1  # plotly's JavaScript embedded once
    assert "<script src=" not in text  # nothing fetched from the network
    assert "softmax: best so far" in text and "sgemm: best so far" in text


def test_markdown_and_json_give_the_same_best_latency(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = small_run(tmp_path / "r1")
    assert cli.main(["report", str(run), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    best = {r["task"]: r["best_us"] for r in doc["runs"][0]["summary"]}
    assert best == {"sgemm": 50.0, "softmax": 50.0}
    assert cli.main(["report", str(run), "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "| softmax | 7 | 50.0 |" in md  # one device: named once, in the heading


def test_several_runs_are_compared_and_labelled_with_their_device(tmp_path: Path) -> None:
    a, b = small_run(tmp_path / "a"), small_run(tmp_path / "b", device="NVIDIA H100", slower=1.5)
    out = tmp_path / "cmp.html"
    assert cli.main(["report", str(a), str(b), "-o", str(out)]) == 0
    text = out.read_text()
    assert "Runs compared" in text and "b (NVIDIA H100, 2 islands)" in text and "a (NVIDIA H200, 2 islands)" in text


def test_a_run_in_progress_is_reported_from_its_complete_parts(tmp_path: Path) -> None:
    run = small_run(tmp_path / "r1")
    (run / "evaluations" / ".tmp-part-1.parquet-abc").write_bytes(b"PAR1 half written")  # a writer mid-batch
    (run / "trials" / "part-0.parquet").unlink()
    assert cli.main(["report", str(run), "-o", str(tmp_path / "p.html")]) == 0


def test_a_damaged_part_is_left_out_and_the_rest_reported(tmp_path: Path) -> None:
    run = small_run(tmp_path / "r1")
    (run / "evaluations" / "part-1.parquet").write_bytes(b"PAR1 cut short by a full disk")
    assert cli.main(["report", str(run), "-o", str(tmp_path / "p.html")]) == 0


def report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fsr", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


@pytest.mark.parametrize("make", ["missing", "no_run", "no_rows", "a_file"])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, make: str) -> None:
    path = tmp_path / "run"
    if make == "no_run":
        path.mkdir()
    elif make == "no_rows":
        write_run(path, [])
    elif make == "a_file":
        path.write_text("{}")
    done = report("report", str(path))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("fsr: error:")


@pytest.mark.parametrize("config", ["missing.toml", "bad.toml", "unknown.toml"])
def test_a_config_file_missing_or_malformed_is_one_line_and_exit_2(tmp_path: Path, config: str) -> None:
    (tmp_path / "bad.toml").write_text("[search\nislands = 2\n")
    (tmp_path / "unknown.toml").write_text("[nonsense]\nx = 1\n")
    run = small_run(tmp_path / "r1")
    done = report("--config", str(tmp_path / config), "report", str(run))
    assert (done.returncode, done.stderr.count("\n")) == (2, 1), done.stderr
    assert done.stderr.startswith(f"fsr: error: config {tmp_path / config}")
    assert not (run / "report.html").exists()
    (tmp_path / "good.toml").write_text("[search]\nislands = 2\n")
    assert cli.main(["--config", str(tmp_path / "good.toml"), "report", str(run)]) == 0


def test_another_tools_run_json_is_not_an_fsr_run_directory(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"name": "sweep-3", "status": "FINISHED", "metrics": {}}))
    done = report("report", str(tmp_path))
    assert (done.returncode, done.stderr.count("\n")) == (2, 1), done.stderr
    assert "not an fsr run directory" in done.stderr and "no evaluations" not in done.stderr


def test_another_tools_parquet_parts_are_not_an_fsr_lineage(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "evaluations").mkdir()
    for n in range(3):
        pq.write_table(pa.table({"step": [1, 2], "loss": [0.5, 0.4]}), tmp_path / "evaluations" / f"part-{n}.parquet")
    done = report("report", str(tmp_path))
    assert (done.returncode, done.stderr.count("\n")) == (2, 1), done.stderr  # no warning per part
    assert "not an fsr run directory" in done.stderr and "3 part file(s)" in done.stderr


def test_an_fsr_run_with_no_rows_yet_says_so(tmp_path: Path) -> None:

    run_json.write_run_json(tmp_path / "r", {"search": {}})
    done = report("report", str(tmp_path / "r"))
    assert done.returncode == 2 and "the lineage has no evaluations yet" in done.stderr


def test_a_damaged_run_json_is_one_warning_and_the_lineage_is_still_reported(tmp_path: Path) -> None:
    run = small_run(tmp_path / "r1")
    (run / "run.json").write_text('{"run_id": "r1", "config": {')  # cut short
    done = report("report", str(run), "--format", "md")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("fsr: warning:") and "run.json" in done.stderr
    assert "| softmax |" in done.stdout
    (run / "run.json").write_text("[1, 2]")  # JSON, but not an object
    assert report("report", str(run), "--format", "md").returncode == 0


def test_ten_thousand_evaluations_report_in_under_ten_seconds_and_ten_megabytes(tmp_path: Path) -> None:
    rows = synthetic_rows(10_000, tasks=3, islands=8)
    run = write_run(tmp_path / "big", rows, trials=synthetic_trials(rows))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "fsr", "report", str(run)], check=True, capture_output=True, cwd=REPO,
                   timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds of the whole command (interpreter start included): its wall time on an idle
    # machine, and a figure that other work on a shared machine does not inflate
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu_s < 10.0
    assert (run / "report.html").stat().st_size < 10 * 2**20
