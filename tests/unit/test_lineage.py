"""The lineage: schema round-trips, candidate JSON, batching, compaction, crash safety, run.json."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fsr import lineage, lineage_schema, run_json
from fsr.types import (
    Candidate,
    LaunchSpec,
    TrialRecord,
)
from tests.support.lineage_writes import failed_evaluation, make_candidate, ok_evaluation, parts, write_rows
from tests.support.paths import ROOT as REPO


def test_full_row_round_trips_through_parquet(tmp_path: Path) -> None:
    c, started = make_candidate(), datetime(2026, 11, 22, 2, 30, tzinfo=UTC)
    e = replace(ok_evaluation(c), worker="gpu0", dtype="bfloat16")  # the worker and the dtype round-trip too
    with lineage.LineageWriter(tmp_path / "r1") as w:
        w.append(c, e, features_detected=["coalesced"], started_at=started,
                 prompt_tokens=1200, completion_tokens=800)
    table = lineage.read(tmp_path / "r1")
    assert table.schema.equals(lineage_schema.EVALUATIONS)
    row = table.to_pylist()[0]
    assert lineage.candidate_from_row(row) == c and lineage.evaluation_from_row(row) == e
    assert row["run_id"] == "r1" and row["speedup"] == pytest.approx(2.0)
    assert row["started_at"] == started and row["finished_at"].tzinfo is not None
    assert (row["prompt_tokens"], row["completion_tokens"], row["error"]) == (1200, 800, None)
    assert row["features_detected"] == ["coalesced"] and row["verdict"] == "OK" and row["dtype"] == "bfloat16"


def test_failed_row_has_null_timing(tmp_path: Path) -> None:
    c = make_candidate()
    e = failed_evaluation(c)
    with lineage.LineageWriter(tmp_path) as w:
        w.append(c, e, error="nvrtc failed")
    row = lineage.read(tmp_path).to_pylist()[0]
    for col in lineage_schema.TIMING_COLUMNS + ("speedup", "baseline_us", "prompt_tokens", "started_at"):
        assert row[col] is None, col
    assert row["error"] == "nvrtc failed" and row["verdict"] == "COMPILE_ERROR"
    assert lineage.evaluation_from_row(row) == e and lineage.candidate_from_row(row) == c


def test_evaluation_row_refuses_mismatched_ids() -> None:
    c = make_candidate()
    with pytest.raises(ValueError):
        lineage.evaluation_row(c, replace(ok_evaluation(c), candidate_id="0" * 16))


def test_candidate_json_round_trip_is_exact() -> None:
    for c in (make_candidate(), Candidate(task="t", source="s", launches=(LaunchSpec("k", ("1",), ("1",), ()),))):
        back = lineage.candidate_from_json(lineage.candidate_to_json(c))
        assert back == c and back.id == c.id


def test_trials_round_trip(tmp_path: Path) -> None:
    with lineage.LineageWriter(tmp_path) as w:
        w.append_trials("abc", [TrialRecord(0, (("BLOCK", 256),), True, "", 3.5),
                                TrialRecord(1, (("BLOCK", 1024),), False, "too much smem", None)])
    rows = lineage.read(tmp_path, "trials").to_pylist()
    assert [(r["candidate_id"], r["trial"], r["feasible"], r["median_us"]) for r in rows] == [
        ("abc", 0, True, 3.5), ("abc", 1, False, None)]
    assert rows[1]["defines"] == [{"name": "BLOCK", "value": 1024}] and rows[1]["reason"] == "too much smem"


def test_append_writes_the_trials_an_evaluation_carries(tmp_path: Path) -> None:
    c = make_candidate()
    trials = (TrialRecord(0, (("BLOCK", 256),), True, "", 4.0), TrialRecord(1, (("BLOCK", 256),), True, "", 4.0, True))
    with lineage.LineageWriter(tmp_path) as w:
        w.append(c, dataclasses.replace(ok_evaluation(c), trials=trials))
    rows = lineage.read(tmp_path, "trials").to_pylist()
    assert [(r["candidate_id"], r["trial"], r["median_us"], r["cached"]) for r in rows] == [
        (c.id, 0, 4.0, False), (c.id, 1, 4.0, True)]
    assert lineage.read(tmp_path).num_rows == 1


def test_batches_by_count(tmp_path: Path) -> None:
    w = lineage.LineageWriter(tmp_path, batch_rows=4, batch_age_s=1e9)
    for i in range(10):
        w.append(make_candidate(i), ok_evaluation(make_candidate(i)))
    assert len(parts(tmp_path)) == 2 and lineage.read(tmp_path).num_rows == 8
    w.flush()
    assert len(parts(tmp_path)) == 3 and lineage.read(tmp_path).num_rows == 10


def test_batches_by_age(tmp_path: Path) -> None:
    now = [0.0]
    w = lineage.LineageWriter(tmp_path, batch_rows=100, batch_age_s=2.0, clock=lambda: now[0])
    c = make_candidate()
    w.append(c, ok_evaluation(c))
    now[0] = 1.5
    w.append_trials(c.id, [TrialRecord(0, (), True, "", None)])
    assert parts(tmp_path) == []
    now[0] = 2.5  # the evaluation is now 2.5 s old; the trial 1 s: only evaluations are due
    w.append_trials(c.id, [TrialRecord(1, (), True, "", None)])
    assert len(parts(tmp_path)) == 1 and parts(tmp_path, "trials") == []
    now[0] = 4.0
    w.append_trials(c.id, [])
    assert lineage.read(tmp_path, "trials").num_rows == 2


def test_empty_read_has_full_schema(tmp_path: Path) -> None:
    for name, schema in lineage_schema.SCHEMAS.items():
        table = lineage.read(tmp_path / "nothing", name)
        assert table.num_rows == 0 and table.schema.equals(schema)
    assert list(lineage.read_pandas(tmp_path, "trials").columns) == lineage_schema.TRIALS.names


def test_compaction_keeps_each_row_once(tmp_path: Path) -> None:
    write_rows(tmp_path, 10)
    before = lineage.read(tmp_path)
    lineage.compact(tmp_path, "evaluations")
    assert len(parts(tmp_path)) == 1
    assert lineage.read(tmp_path).equals(before)
    write_rows(tmp_path, 3)  # new parts after a compaction are merged into the next one
    lineage.compact(tmp_path, "evaluations")
    assert len(parts(tmp_path)) == 1 and lineage.read(tmp_path).num_rows == 13
    assert not list((tmp_path / "evaluations").glob(".tmp-*"))


def test_kill_during_compaction_counts_each_row_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_rows(tmp_path, 12)
    ids = lineage.read(tmp_path).column("candidate_id").to_pylist()
    # A compaction killed after renaming the merged file, before deleting any part ...
    monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: None)
    lineage.compact(tmp_path, "evaluations")
    monkeypatch.undo()
    # ... and another killed while writing its temporary file.
    half = tmp_path / "evaluations" / ".tmp-part-x-m.parquet-1234"
    half.write_bytes(b"PAR1 half a file")
    assert len(parts(tmp_path)) == 4
    assert lineage.read(tmp_path).column("candidate_id").to_pylist() == ids
    write_rows(tmp_path, 2)  # a later part, then a compaction that finishes the job
    os.utime(half, (time.time() - 7200, time.time() - 7200))
    lineage.compact(tmp_path, "evaluations")
    assert len(parts(tmp_path)) == 1 and lineage.read(tmp_path).num_rows == 14
    assert not half.exists()


CRASH_WRITER = textwrap.dedent("""
    import sys
    sys.path[:0] = [{repo!r}]
    from tests.support.lineage_writes import make_candidate, ok_evaluation
    from fsr.lineage import LineageWriter
    w = LineageWriter({run_dir!r}, batch_rows=5, batch_age_s=1e9)
    i = 0
    while True:
        c = make_candidate(i)
        w.append(c, ok_evaluation(c))
        i += 1
""")


def test_sigkill_loses_only_the_batch_in_flight(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    script = CRASH_WRITER.format(repo=str(REPO), run_dir=str(run_dir))
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 60
        while len(parts(run_dir)) < 3:
            assert proc.poll() is None and time.monotonic() < deadline, "writer died or stalled"
            time.sleep(0.01)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    committed = parts(run_dir)
    for p in committed:
        pq.read_metadata(p)  # every visible part is a whole Parquet file
    ids = lineage.read(run_dir).column("candidate_id").to_pylist()
    assert len(ids) == 5 * len(committed) >= 15
    assert ids == [make_candidate(i).id for i in range(len(ids))]  # exactly the committed prefix


def test_run_json_keeps_config_and_drops_secrets(tmp_path: Path) -> None:
    config = {"llm": {"model": "gpt-4.1", "api_key_env": "OPENAI_API_KEY", "api_key": "sk-1",
                      "OPENAI_API_KEY": "sk-2", "max_tokens": 4096, "base_url": "https://u:pw@host/v1"},
              "search": {"islands": 4, "nested": [{"Auth_Token": "t", "keep": 1}]}}
    run_json.write_run_json(tmp_path, config, {"devices": ["NVIDIA H100"], "client_secret": "s"})
    text = (tmp_path / "run.json").read_text()
    for secret in ("sk-1", "sk-2", "Auth_Token", "client_secret", "pw@"):
        assert secret not in text
    doc = run_json.read_run_json(tmp_path)
    assert doc["config"]["llm"] == {"model": "gpt-4.1", "api_key_env": "OPENAI_API_KEY",
                                    "max_tokens": 4096, "base_url": "https://host/v1"}
    assert doc["config"]["search"] == {"islands": 4, "nested": [{"keep": 1}]}
    assert doc["devices"] == ["NVIDIA H100"] and doc["run_id"] == tmp_path.name
    assert doc["versions"]["pyarrow"] and doc["versions"]["fsr"] and doc["hostname"]
    assert not list(tmp_path.glob(".tmp-*"))


def test_run_ids_start_with_utc_time_and_differ() -> None:
    before = f"{datetime.now(UTC):%Y%m%d-%H%M%S}"
    ids = {lineage.new_run_id() for _ in range(100)}
    after = f"{datetime.now(UTC):%Y%m%d-%H%M%S}"
    assert len(ids) == 100
    assert all(re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", i) and before <= i[:15] <= after for i in ids)


def test_lineage_loads_neither_ray_nor_cupy(tmp_path: Path) -> None:
    code = ("import json, sys; from fsr import run_json; run_json.write_run_json(sys.argv[1], {}); "
            "print(json.dumps([m for m in ('ray', 'cupy') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == []


def test_part_written_before_a_nullable_column_existed_reads_back_with_nulls(tmp_path: Path) -> None:
    write_rows(tmp_path, 3)
    for f in parts(tmp_path):  # as an older fsr wrote it: no setup_s column
        pq.write_table(pq.read_table(f).drop_columns(["setup_s"]), f)
    write_rows(tmp_path, 2)  # and newer rows beside it
    table = lineage.read(tmp_path)
    assert table.schema == lineage_schema.EVALUATIONS
    assert table.column("setup_s").to_pylist() == [None] * 3 + [1.7] * 2
    assert lineage.evaluation_from_row(table.to_pylist()[0]).setup_s == 0.0
    lineage.compact(tmp_path, "evaluations")
    assert lineage.read(tmp_path).column("setup_s").null_count == 3


def test_part_missing_a_required_column_is_skipped_with_a_warning_naming_it(tmp_path: Path, caplog) -> None:
    write_rows(tmp_path, 2)
    for f in parts(tmp_path):
        pq.write_table(pq.read_table(f).drop_columns(["verdict"]), f)
    assert lineage.read(tmp_path).num_rows == 0
    assert "verdict" in caplog.text and parts(tmp_path)[0].name in caplog.text


def duplicate_parts(run_dir: Path, table: str = "evaluations") -> None:
    """Every part file present twice, as a copied or merged run directory leaves it."""
    for f in parts(run_dir, table):
        shutil.copyfile(f, f.with_name(f"part-copy-{f.name[len('part-'):]}"))


def test_a_part_file_present_twice_counts_each_evaluation_once_and_says_so(tmp_path: Path, caplog) -> None:
    write_rows(tmp_path, 6, batch_rows=4)  # parts of 4 and 2 rows, each with its trials
    w = lineage.LineageWriter(tmp_path, batch_rows=100, batch_age_s=1e9)
    w.append_trials("c", [TrialRecord(0, (("BLOCK", 128),), True, "", 5.0),
                           TrialRecord(1, (("BLOCK", 256),), True, "", 4.0)])
    w.flush()
    once = lineage.read(tmp_path)
    duplicate_parts(tmp_path)
    duplicate_parts(tmp_path, "trials")
    assert len(parts(tmp_path)) == 4
    twice = lineage.read(tmp_path)
    assert twice.num_rows == 6 and twice.sort_by("finished_at").equals(once.sort_by("finished_at"))
    assert "6 row(s) present twice were dropped" in caplog.text and "each evaluation counts once" in caplog.text
    assert lineage.read(tmp_path, "trials").num_rows == 2 and "2 row(s)" in caplog.text
    lineage.compact(tmp_path, "evaluations")  # the merged file holds each row once
    caplog.clear()
    assert len(parts(tmp_path)) == 1 and pq.read_table(parts(tmp_path)[0]).num_rows == 6
    assert lineage.read(tmp_path).num_rows == 6 and "dropped" not in caplog.text


def test_a_candidate_evaluated_again_is_two_evaluations(tmp_path: Path, caplog) -> None:
    c = make_candidate()
    with lineage.LineageWriter(tmp_path, batch_rows=1) as w:
        for wall_s in (3.2, 3.2, 3.5):  # as a resume or `fsr eval --repeat` appends it
            w.append(c, replace(ok_evaluation(c), wall_s=wall_s, worker="local"))
    assert lineage.read(tmp_path).num_rows == 3 and "dropped" not in caplog.text
