"""The lineage's two tiers: a screening row and the certification row that re-judged it round-trip,
with whether it passed, what failed and the seeds of the sets it drew; cut-short and
answered-from-an-earlier-judgement rows too; a lineage written before these columns reads back as
screenings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq

from fsr import lineage, lineage_schema
from fsr.types import Tier, Verdict
from tests.support.lineage_writes import make_candidate, ok_evaluation, parts, write_rows

NEW_COLUMNS = ["tier", "certified", "certifies", "failed_check", "cut_short", "answered_from", "certify_seeds",
               "control_us"]
SEEDS = (("fresh inputs at rows=1,cols=1", 0), ("fresh inputs at rows=7,cols=33", 2**63 - 1))


def test_a_certification_request_has_its_own_id_and_the_screened_ids_stay_as_they_were() -> None:
    screened = make_candidate()
    request = replace(screened, certify=screened.id)
    assert request.id != screened.id
    assert replace(request, certify="").id == screened.id  # unset, the field is not part of identity
    assert replace(screened, certify="another").id != request.id


def test_screening_and_certification_rows_round_trip(tmp_path: Path) -> None:
    screened = make_candidate()
    screening = replace(ok_evaluation(screened), cut_short=False)
    request = replace(screened, certify=screened.id)
    failed = replace(ok_evaluation(request), verdict=Verdict.UNCERTIFIED, tier=Tier.CERTIFY, certified=False,
                     failed_check="fresh inputs at rows=7,cols=33", message="3 of 231 elements wrong",
                     certify_seeds=SEEDS)
    with lineage.LineageWriter(tmp_path) as w:
        w.append(screened, screening)
        w.append(request, failed)
    first, second = lineage.read(tmp_path).to_pylist()
    assert (first["tier"], first["certified"], first["certifies"], first["failed_check"]) == ("screen", None, None, None)
    assert (second["tier"], second["certified"], second["certifies"]) == ("certify", False, screened.id)
    assert second["verdict"] == "UNCERTIFIED" and second["failed_check"] == "fresh inputs at rows=7,cols=33"
    assert first["certify_seeds"] is None  # a screening's sets come from eval.seed and the task
    assert [(s["name"], s["value"]) for s in second["certify_seeds"]] == list(SEEDS)
    assert lineage.candidate_from_row(second) == request and lineage.evaluation_from_row(second) == failed
    assert lineage.candidate_from_row(first) == screened and lineage.evaluation_from_row(first) == screening


def test_cut_short_and_answered_from_round_trip(tmp_path: Path) -> None:
    c = make_candidate()
    e = replace(ok_evaluation(c), cut_short=True, answered_from="0123456789abcdef")
    with lineage.LineageWriter(tmp_path) as w:
        w.append(c, e)
    row = lineage.read(tmp_path).to_pylist()[0]
    assert row["cut_short"] is True and row["answered_from"] == "0123456789abcdef"
    assert lineage.evaluation_from_row(row) == e


def test_a_lineage_written_before_the_tier_columns_reads_back_as_screenings(tmp_path: Path) -> None:
    write_rows(tmp_path, 2)
    for f in parts(tmp_path):  # as an older fsr wrote it
        pq.write_table(pq.read_table(f).drop_columns(NEW_COLUMNS), f)
    table = lineage.read(tmp_path)
    assert table.schema == lineage_schema.EVALUATIONS
    for column in NEW_COLUMNS:
        assert table.column(column).null_count == 2, column
    e = lineage.evaluation_from_row(table.to_pylist()[0])
    assert (e.tier, e.certified, e.failed_check, e.cut_short, e.answered_from) == (Tier.SCREEN, None, "", False, "")
    assert e.certify_seeds == ()
    assert lineage.candidate_from_row(table.to_pylist()[0]).certify == ""


def test_a_certification_row_written_before_the_seeds_column_reads_back_without_seeds(tmp_path: Path) -> None:
    request = replace(make_candidate(), certify="0123456789abcdef")
    passed = replace(ok_evaluation(request), tier=Tier.CERTIFY, certified=True, certify_seeds=SEEDS)
    with lineage.LineageWriter(tmp_path) as w:
        w.append(request, passed)
    for f in parts(tmp_path):
        pq.write_table(pq.read_table(f).drop_columns(["certify_seeds"]), f)
    table = lineage.read(tmp_path)
    assert table.schema == lineage_schema.EVALUATIONS and table.column("certify_seeds").null_count == 1
    assert lineage.evaluation_from_row(table.to_pylist()[0]) == replace(passed, certify_seeds=())


def test_a_certification_keeps_its_control_median_and_a_row_from_before_the_column_reads_without(
        tmp_path: Path) -> None:
    request = replace(make_candidate(), certify="0123456789abcdef")
    passed = replace(ok_evaluation(request), tier=Tier.CERTIFY, certified=True, control_us=99.5)
    with lineage.LineageWriter(tmp_path) as w:
        w.append(request, passed)
    (row,) = lineage.read(tmp_path).to_pylist()
    assert row["control_us"] == 99.5 and lineage.evaluation_from_row(row) == passed
    for f in parts(tmp_path):
        pq.write_table(pq.read_table(f).drop_columns(["control_us"]), f)
    (row,) = lineage.read(tmp_path).to_pylist()
    assert row["control_us"] is None and lineage.evaluation_from_row(row) == replace(passed, control_us=None)
