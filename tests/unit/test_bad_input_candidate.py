"""Header expressions without an integer value (inf, NaN) or beyond the driver's integers are a
HeaderError (a REJECTED verdict), never an OverflowError from deep in the evaluator."""

from pathlib import Path

import pytest

from fsr import candidate, tasks

BASELINE = (Path(tasks.DEFAULT_TASKS_DIR) / "softmax" / "baseline.cu").read_text()
GRID = 'grid = ["cdiv(rows, BLOCK)"]'


@pytest.fixture(scope="module")
def softmax():
    return tasks.load("softmax")


@pytest.mark.parametrize("grid", ["1e400", "-(-1e400)", "1e308 * 10", "1e308 * 1e308 - 1e308 * 1e308",
                                  "cdiv(rows, 1e-320)", "2 ** 31", "9" * 40, "0", "2.5"])
def test_a_grid_without_a_valid_integer_value_is_a_header_error(softmax, grid):
    with pytest.raises(candidate.HeaderError, match="softmax_baseline"):
        candidate.parse(BASELINE.replace(GRID, f'grid = ["{grid}"]'), softmax)


def test_a_scratch_count_without_an_integer_value_is_refused_when_parsed(softmax):
    scratch = '[[scratch]]\nname = "t"\ndtype = "float32"\ncount = "1e400"\n\n[[launch]]'
    with pytest.raises(candidate.HeaderError, match="scratch"):
        candidate.parse(BASELINE.replace("[[launch]]", scratch), softmax)


def test_the_largest_grid_the_driver_takes_still_parses(softmax):
    cand = candidate.parse(BASELINE.replace(GRID, 'grid = ["2 ** 31 - 1"]'), softmax)
    assert candidate.launch_dims(cand, {"rows": 1, "cols": 1})[0][0] == (2**31 - 1,)
