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
from plotly.offline import get_plotlyjs

from fsr import cli
from tests.lineage_rows import small_run, synthetic_rows, synthetic_trials, write_run

REPO = Path(__file__).resolve().parents[2]


def test_html_page_is_written_into_the_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = small_run(tmp_path / "r1")
    assert cli.main(["report", str(run)]) == 0
    page = run / "report.html"
    assert capsys.readouterr().out.strip() == str(page)
    text = page.read_text()
    assert text.count(get_plotlyjs()[:200]) == 1  # plotly's JavaScript embedded once
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
    assert "| softmax | NVIDIA H200 | 7 | 50.0 |" in md


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


@pytest.mark.parametrize("make", ["missing", "no_run", "no_rows", "a_file"])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, make: str) -> None:
    path = tmp_path / "run"
    if make == "no_run":
        path.mkdir()
    elif make == "no_rows":
        write_run(path, [])
    elif make == "a_file":
        path.write_text("{}")
    done = subprocess.run([sys.executable, "-m", "fsr", "report", str(path)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("fsr: error:")


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
