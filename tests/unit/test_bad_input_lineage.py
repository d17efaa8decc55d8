"""A damaged lineage: run.json that is not JSON is one LineageError; a damaged Parquet part is
skipped with a warning naming it and every readable row is kept, by the reader and by compaction."""

from pathlib import Path

import pytest

from fsr import lineage, run_json
from tests.support.lineage_writes import make_candidate, ok_evaluation, parts, write_rows


@pytest.mark.parametrize("text", [b"{not json", b"[1, 2]", b"\xff\xfe", b""])
def test_a_damaged_run_json_is_a_lineage_error_naming_it(tmp_path, text):
    (tmp_path / "run.json").write_bytes(text)
    with pytest.raises(lineage.LineageError, match="run.json is damaged"):
        run_json.read_run_json(tmp_path)


def test_a_missing_run_json_says_it_is_not_a_run_directory(tmp_path):
    with pytest.raises(lineage.LineageError, match="not a run directory"):
        run_json.read_run_json(tmp_path)


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"",
                      "garbage": b"PAR1" + bytes(range(256)) * 4 + b"PAR1",
                      "flipped_middle": data[:200] + bytes(b ^ 0xFF for b in data[200:-300]) + data[-300:]}[how])


@pytest.mark.parametrize("how", ["truncated", "empty", "garbage", "flipped_middle"])
def test_a_damaged_part_is_skipped_with_a_warning_and_the_other_rows_are_kept(tmp_path, caplog, how):
    write_rows(tmp_path, 12, batch_rows=4)  # three parts of four rows
    first, *_ = parts(tmp_path)
    damage(first, how)
    table = lineage.read(tmp_path)
    assert table.num_rows == 8
    assert first.name in caplog.text and "skipped" in caplog.text
    assert {make_candidate(i).id for i in range(4, 12)} == set(table.column("candidate_id").to_pylist())


def test_compaction_keeps_the_readable_rows_and_leaves_the_damaged_part_alone(tmp_path, caplog):
    write_rows(tmp_path, 12, batch_rows=4)
    first, *_ = parts(tmp_path)
    damage(first, "truncated")
    damaged_bytes = first.read_bytes()
    lineage.compact(tmp_path, "evaluations")
    assert first.read_bytes() == damaged_bytes  # not deleted, not merged: evidence for the user
    assert lineage.read(tmp_path).num_rows == 8 and len(parts(tmp_path)) == 2


def test_a_resumed_writer_appends_next_to_a_damaged_part(tmp_path, caplog):
    write_rows(tmp_path, 4, batch_rows=4)
    damage(parts(tmp_path)[0], "garbage")
    with lineage.LineageWriter(tmp_path) as writer:
        c = make_candidate(99)
        writer.append(c, ok_evaluation(c))
    assert lineage.read(tmp_path).column("candidate_id").to_pylist() == [make_candidate(99).id]
