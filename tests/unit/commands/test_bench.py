"""`fsr bench`: the per-task table and geometric means from a lineage, and the command end to end
on this machine (the fake evaluator behind the local executor)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from fsr import cli, lineage, lineage_schema, run_json
from fsr.commands import bench
from fsr.testing.fakes import timing
from fsr.types import Candidate, Evaluation, LaunchSpec, Verdict


def row(task: str, n: int, verdict: Verdict = Verdict.OK, median_us: float | None = None,
        baseline_us: float | None = None, library_us: float | None = None, torch_us: float | None = None,
        fraction: float = 0.5, torch_compile_us: float | None = None) -> dict:
    cand = Candidate(task=task, source=f"// {task} {n}",
                     launches=(LaunchSpec("k", ("1",), ("32",), ("x",)),))
    ev = Evaluation(cand.id, task, verdict, device="NVIDIA H200", baseline_us=baseline_us,
                    library_us=library_us, torch_us=torch_us, torch_compile_us=torch_compile_us,
                    timing=replace(timing(median_us), ceiling_fraction=fraction) if median_us else None)
    return lineage.evaluation_row(cand, replace(ev, worker="w0"))


def frame(rows: list[dict]):
    return pa.Table.from_pylist(rows, schema=lineage_schema.EVALUATIONS).to_pandas()


def hand_built():
    """softmax: best 10 us of baseline 80, library 20, torch 40, torch.compile 25; sgemm: best 100 us
    of baseline 200, library 50, no torch; scan: nothing correct."""
    return frame([
        row("softmax", 0, median_us=80.0, baseline_us=80.0, library_us=20.0, torch_us=40.0),
        row("softmax", 1, median_us=10.0, baseline_us=80.0, library_us=20.0, torch_us=40.0, fraction=0.9,
            torch_compile_us=25.0),
        row("softmax", 2, Verdict.WRONG),
        row("sgemm", 0, median_us=100.0, baseline_us=200.0, library_us=50.0),
        row("sgemm", 1, Verdict.COMPILE_ERROR),
        row("scan", 0, Verdict.WRONG),
    ])


def test_rows_follow_the_campaign_order_and_carry_each_tasks_best():
    rows = bench.bench_rows(hand_built(), ["softmax", "sgemm", "scan", "never_ran"])
    assert [r["task"] for r in rows] == ["softmax", "sgemm", "scan", "never_ran"]
    softmax, sgemm, scan, never = rows
    assert softmax["best_us"] == 10.0 and softmax["ceiling_fraction"] == 0.9
    assert (softmax["speedup_baseline"], softmax["speedup_library"], softmax["speedup_torch"]) == (8.0, 2.0, 4.0)
    assert softmax["evaluations"] == 3 and softmax["OK"] == 2 and softmax["WRONG"] == 1
    assert sgemm["speedup_library"] == 0.5 and sgemm["speedup_torch"] is None
    assert scan["best_us"] is None and scan["speedup_baseline"] is None and scan["WRONG"] == 1
    assert never["evaluations"] == 0 and never["best_us"] is None


def test_geomeans_cover_only_the_tasks_where_each_comparator_was_measured():
    means = bench.geomeans(bench.bench_rows(hand_built(), []))
    assert means["baseline"] == {"value": pytest.approx(math.sqrt(8.0 * 2.0)), "tasks": 2}
    assert means["library"] == {"value": pytest.approx(1.0), "tasks": 2}
    assert means["torch"] == {"value": pytest.approx(4.0), "tasks": 1}
    assert bench.geomeans([]) == {name: {"value": None, "tasks": 0} for _, name in bench.COMPARATORS}


def test_fast_p_counts_every_task_and_only_correct_kernels_faster_than_p():
    """softmax 4x eager (fast_1 and fast_2), sgemm correct but eager not timed (fast_0 only),
    scan nothing correct, never_ran not evaluated: all four in the denominator."""
    rows = bench.bench_rows(hand_built(), ["softmax", "sgemm", "scan", "never_ran"])
    scores = bench.fast_p(rows)
    assert scores["torch"] == {"tasks": 4, "measured": 1, "fast_0": 0.5, "fast_0_tasks": 2,
                               "fast_1": 0.25, "fast_1_tasks": 1, "fast_2": 0.25, "fast_2_tasks": 1}
    # the library: softmax 2x (not more than 2x), sgemm 0.5x (slower: not fast_1)
    assert (scores["library"]["fast_1_tasks"], scores["library"]["fast_2_tasks"]) == (1, 0)
    assert scores["baseline"]["fast_2_tasks"] == 1  # softmax 8x; sgemm's 2.0x is not more than 2x
    table = bench.to_markdown(rows, bench.geomeans(rows), Path("runs/r1"))
    assert "- vs PyTorch eager (measured for 1): fast_0 2/4 (50%), fast_1 1/4 (25%), fast_2 1/4 (25%)" in table


def test_a_task_without_a_correct_kernel_still_shows_what_pytorch_takes():
    rows = bench.bench_rows(frame([row("conv", 0, Verdict.WRONG, torch_us=30.0, torch_compile_us=20.0),
                                   row("conv", 1, Verdict.COMPILE_ERROR)]), [])
    (conv,) = rows
    assert (conv["torch_us"], conv["torch_compile_us"]) == (30.0, 20.0)
    assert conv["best_us"] is None and conv["speedup_torch"] is None and conv["speedup_pytorch"] is None


def test_fast_p_of_no_tasks_is_missing_not_zero():
    scores = bench.fast_p([])
    assert scores["torch"]["tasks"] == 0 and scores["torch"]["fast_1"] is None


def test_a_lineage_without_the_torch_column_reads_as_not_measured():
    old = hand_built().drop(columns=["torch_us"])
    rows = bench.bench_rows(old, [])
    assert all(r["speedup_torch"] is None for r in rows)
    assert bench.geomeans(rows)["torch"] == {"value": None, "tasks": 0}
    table = bench.to_markdown(rows, bench.geomeans(rows), Path("runs/r1"))
    assert "| n/a (0 tasks) |" in table


def test_markdown_has_a_row_per_task_and_the_geomean_row():
    rows = bench.bench_rows(hand_built(), ["softmax", "sgemm", "scan"])
    text = bench.to_markdown(rows, bench.geomeans(rows), Path("runs/r1"))
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(lines) == 1 + 3 + 1  # header, tasks, geomean
    assert lines[1].startswith("| softmax | 3 | 10.0 us | 90.0% | 8.00x | 2.00x | 4.00x | 2.50x | 2.50x |")
    assert lines[3].startswith("| scan | 1 | n/a | n/a | n/a | n/a | n/a | n/a | n/a | WRONG 1 |")
    assert lines[4] == ("| geometric mean | 6 | | | 4.00x (2 tasks) | 1.00x (2 tasks) | 4.00x (1 tasks) | "
                        "2.50x (1 tasks) | 2.50x (1 tasks) | |")
    assert "NVIDIA H200" in text


# ---- the command --------------------------------------------------------------------------------

def test_bench_runs_every_task_of_the_tasks_dir_and_writes_the_table(suite, tmp_path, fake_gpu, capsys):
    runs = tmp_path / "runs"
    code = cli.main(["--tasks-dir", str(suite), "bench", "--runs-dir", str(runs), "--max-evaluations", "5",
                     "--tune-trials", "0", "--plain"])
    assert code == 0
    (run_dir,) = runs.iterdir()
    doc = json.loads((run_dir / "bench.json").read_text())
    assert [t["task"] for t in doc["tasks"]] == ["layernorm", "softmax"]
    for t in doc["tasks"]:
        assert 1 <= t["evaluations"] <= 5 and t["OK"] == t["evaluations"]
        assert t["speedup_baseline"] == pytest.approx(1000.0 / t["best_us"])
        assert t["speedup_library"] == pytest.approx(500.0 / t["best_us"])
    assert doc["geomean"]["torch"]["tasks"] == 1 and doc["geomean"]["library"]["tasks"] == 2
    assert doc["fast_p"]["torch"]["tasks"] == 2 and doc["fast_p"]["torch"]["measured"] == 1
    table = (run_dir / "bench.md").read_text()
    assert table in capsys.readouterr().out
    assert "Command: `" in table and " UTC." in table
    assert bench._provenance({"command": ["/usr/bin/fsr", "bench", "--plain"], "created_at": "2026-11-23T06:21:39"}) \
        == "Command: `fsr bench --plain`. Started: 2026-11-23 06:21 UTC."
    assert "| layernorm |" in table and "| geometric mean |" in table
    (campaign,) = run_json.read_run_json(run_dir)["campaigns"]  # the driver's time, for fsr report
    assert campaign["evaluations"] == sum(t["evaluations"] for t in doc["tasks"])
    assert campaign["driver_ms_per_evaluation"] > 0 and campaign["stopped_by"]


def test_bench_of_named_tasks_runs_only_those(suite, tmp_path, fake_gpu):
    runs = tmp_path / "runs"
    assert cli.main(["--tasks-dir", str(suite), "bench", "softmax", "--runs-dir", str(runs),
                     "--max-evaluations", "3", "--tune-trials", "0", "--plain"]) == 0
    doc = json.loads(next(runs.iterdir()).joinpath("bench.json").read_text())
    assert [t["task"] for t in doc["tasks"]] == ["softmax"]


def test_bench_certifies_in_the_mode_its_option_names_and_ranks_certified_results(suite, tmp_path, fake_gpu):
    runs = tmp_path / "runs"
    assert cli.main(["--tasks-dir", str(suite), "bench", "--runs-dir", str(runs), "--max-evaluations", "5",
                     "--tune-trials", "0", "--certify", "end", "--plain"]) == 0
    (run_dir,) = runs.iterdir()
    assert run_json.read_run_json(run_dir)["config"]["eval"]["certify"] == "end"
    rows = lineage.read(run_dir).to_pylist()
    passed = {r["certifies"]: r["task"] for r in rows if r["tier"] == "certify" and r["certified"]}
    assert sorted(passed.values()) == ["layernorm", "softmax"]  # one certification a task, at its end
    doc = json.loads((run_dir / "bench.json").read_text())
    by_id = {r["candidate_id"]: r["median_us"] for r in rows if r["tier"] == "screen"}
    assert {t["task"]: t["best_us"] for t in doc["tasks"]} == {task: by_id[cid] for cid, task in passed.items()}
    # beside each best, its certification's own median: the same kernel timed again
    again = {r["certifies"]: r["median_us"] for r in rows if r["tier"] == "certify" and r["certified"]}
    assert {t["task"]: t["certified_us"] for t in doc["tasks"]} == {task: again[cid] for cid, task in passed.items()}
    assert bench.CERTIFIED_NOTE in (run_dir / "bench.md").read_text()


def certification_row(screened: dict, median_us: float | None, passed: bool = True) -> dict:
    """A certification row of the screened row `screened` (lineage.evaluation_row's columns)."""
    return screened | {"candidate_id": screened["candidate_id"] + "c", "tier": "certify", "certified": passed,
                       "certifies": screened["candidate_id"], "median_us": median_us,
                       "verdict": (Verdict.OK if passed else Verdict.UNCERTIFIED).value}


def test_certified_medians_are_of_the_kernel_the_table_ranks_first():
    from fsr import certification

    fast, slow, other = row("softmax", 0, median_us=10.0), row("softmax", 1, median_us=12.0), row("sgemm", 0, median_us=90.0)
    uncertified = row("softmax", 2, median_us=8.0)  # faster, never certified: no result
    failed = row("sgemm", 1, median_us=80.0)  # faster, failed its certification
    every = frame([fast, slow, other, uncertified, failed, certification_row(fast, 10.4),
                   certification_row(slow, 12.1), certification_row(other, 91.0), certification_row(failed, 99.0, False)])
    assert certification.certified_medians(every) == {"softmax": (10.0, 10.4), "sgemm": (90.0, 91.0)}
    counted = certification.counted(every, True)
    rows = bench.bench_rows(counted, ["softmax", "sgemm", "scan"], certified={"softmax": 10.4, "sgemm": 91.0})
    assert [(r["best_us"], r["certified_us"]) for r in rows] == [(10.0, 10.4), (90.0, 91.0), (None, None)]
    text = bench.to_markdown(rows, bench.geomeans(rows), Path("runs/r1"))
    assert f"{bench.CERTIFIED_NOTE}: softmax 10.4 us (+4.0%), sgemm 91.0 us (+1.1%)." in text
    assert certification.certified_medians(frame([fast, slow])) == {}  # nothing certified: nothing to say


@pytest.mark.parametrize("argv", [
    ["bench", "--certify", "maybe"],
    ["bench", "no_such_task"],
    ["bench", "--max-evaluations", "0"],
    ["bench", "--max-wall", "-5"],
    ["--tasks-dir", "/nonexistent/tasks", "bench"],
    ["bench", "--max-evaluations", "x"],
    ["bench", "--gpus", "0"],
])
def test_bad_input_is_one_line_and_exit_2_before_any_run(argv, tmp_path, fake_gpu, capsys):
    runs = tmp_path / "runs"
    try:
        code = cli.main(argv + ["--runs-dir", str(runs)])
    except SystemExit as e:  # argparse's own checks exit from the parser
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("fsr: error:") and err.count("\n") == 1 and "Traceback" not in err
    assert not runs.exists() or not any(runs.iterdir())


def test_bench_with_a_model_writes_the_first_kernel_of_a_task_without_baseline(tmp_path, fake_gpu, monkeypatch):
    """`fsr bench --model --base-url` (a KernelBench campaign): the model is asked, its kernel is
    evaluated, and the table has the imported task's row."""
    from fsr.tasks import load
    from fsr.testing.fakes import without_baseline
    from fsr.testing.llm_server import GOOD_KERNEL, ScriptedServer, fenced, reply

    without_baseline(load("softmax"), tmp_path / "tasks")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted")
    runs = tmp_path / "runs"
    with ScriptedServer() as server:
        server.push(*[reply(fenced(GOOD_KERNEL + f"// variant {i}\n")) for i in range(12)])
        code = cli.main(["--tasks-dir", str(tmp_path / "tasks"), "bench", "--model", "scripted", "--base-url",
                         server.base_url, "--runs-dir", str(runs), "--max-evaluations", "3", "--tune-trials", "0",
                         "--plain"])
        asked = len(server.bodies)
    assert code == 0 and asked >= 1
    (run_dir,) = runs.iterdir()
    doc = json.loads((run_dir / "bench.json").read_text())
    (row,) = doc["tasks"]
    assert row["task"] == "softmax" and row["evaluations"] >= 1 and row["OK"] >= 1
    assert run_json.read_run_json(run_dir)["config"]["llm"]["model"] == "scripted"


def test_a_named_library_is_named_in_its_cell_and_an_unnamed_one_is_not():
    rows = bench.bench_rows(hand_built(), ["softmax", "sgemm", "scan"], libraries={"softmax": "CuPy kernels", "scan": "CUB"})
    assert [r["library"] for r in rows] == ["CuPy kernels", None, "CUB"]
    lines = [line for line in bench.to_markdown(rows, bench.geomeans(rows), Path("runs/r1")).splitlines()
             if line.startswith("| ")]
    assert lines[1].startswith("| softmax | 3 | 10.0 us | 90.0% | 8.00x | 2.00x (CuPy kernels) | 4.00x |")
    assert lines[2].startswith("| sgemm | 2 | 100.0 us | 50.0% | 2.00x | 0.50x | n/a |")
    # no figure of the named library: the cell says so, rather than name a figure that is not there
    assert lines[3].startswith("| scan | 1 | n/a | n/a | n/a | n/a (CUB not timed) | n/a |")
    timed = [r | {"library_us": 7.0} if r["task"] == "scan" else r for r in rows]  # no correct kernel: no speedup
    assert "| scan | 1 | n/a | n/a | n/a | n/a | n/a |" in bench.to_markdown(timed, bench.geomeans(timed), Path("r"))


def test_bench_names_the_library_a_task_declares(suite, tmp_path, fake_gpu):
    toml = suite / "softmax" / "task.toml"
    toml.write_text(toml.read_text().replace('name = "softmax"\n', 'name = "softmax"\nlibrary = "CuPy softmax"\n', 1))
    runs = tmp_path / "runs"
    assert cli.main(["--tasks-dir", str(suite), "bench", "--runs-dir", str(runs), "--max-evaluations", "3",
                     "--tune-trials", "0", "--plain"]) == 0
    (run_dir,) = runs.iterdir()
    assert run_json.read_run_json(run_dir)["libraries"] == {"softmax": "CuPy softmax"}
    doc = json.loads((run_dir / "bench.json").read_text())
    assert {t["task"]: t["library"] for t in doc["tasks"]} == {"layernorm": None, "softmax": "CuPy softmax"}
    table = (run_dir / "bench.md").read_text()
    assert re.search(r"^\| softmax \|.* \| [\d.]+x \(CuPy softmax\) \|", table, re.M)
    assert not re.search(r"^\| layernorm \|.*\(", table, re.M)
