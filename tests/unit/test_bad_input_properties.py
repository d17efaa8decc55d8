"""Property-based tests: generated malformed configs, candidate headers, task.toml files and
Parquet parts thrown at fsr's loaders. Each ends in fsr's documented error (ConfigError,
HeaderError, TaskError) or a skipped part, never another exception; a valid input still loads.

Profile "fsr" (the default) keeps CI fast; HYPOTHESIS_PROFILE=deep searches longer.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fsr import candidate, config, lineage, tasks

settings.register_profile("fsr", max_examples=40, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("deep", max_examples=2000, deadline=None, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fsr"))

SOFTMAX = tasks.DEFAULT_TASKS_DIR / "softmax"

# ---- TOML values and a small writer (tests only: fsr reads TOML, never writes it) ---------------

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)  # no lone surrogates: TOML refuses them
SCALARS = (st.integers(-3, 300) | st.sampled_from([0, -1, 2**31, 2**63 - 1, -(2**63)])
           | st.floats(allow_nan=True, allow_infinity=True) | st.booleans()
           | TEXT | st.sampled_from(["", "\ud800", "rows", "cols", "x", "y", "BLOCK", "1/0", "rows **",
                                                    "float32", "in", "out", "cdiv(rows, 0)", "9" * 30, "1e400", "1e308 * 10 - 1e308 * 10",
                                                    "cdiv(rows, 1e-320)", "rows ** 64", "2.5", "max()"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(TEXT.filter(bool), inner, max_size=3), max_leaves=8)


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return _quoted(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_quoted(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def _quoted(text: str) -> str:
    """A TOML basic string (JSON's escapes, raw non-ASCII: JSON would write surrogate pairs, which TOML refuses)."""
    return json.dumps(text, ensure_ascii=False)


def toml_text(doc: dict[str, Any]) -> str:
    """`doc` as TOML: scalars and inline values first, then tables and arrays of tables."""
    lines = [f"{_quoted(k)} = {toml_value(v)}" for k, v in doc.items() if not _is_table(v)]
    for k, v in doc.items():
        if isinstance(v, dict) and _is_table(v):
            lines += [f"[{_quoted(k)}]"] + [f"{_quoted(a)} = {toml_value(b)}" for a, b in v.items()]
        elif isinstance(v, list) and _is_table(v):
            for table in v:
                lines += [f"[[{_quoted(k)}]]"] + [f"{_quoted(a)} = {toml_value(b)}" for a, b in table.items()]
    return "\n".join(lines) + "\n"


def _is_table(v: Any) -> bool:
    return (isinstance(v, dict) and bool(v)) or (isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v))


@st.composite
def mutated(draw: st.DrawFn, doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with a few keys, at any depth, dropped, replaced by generated values, or added."""
    doc = json.loads(json.dumps(doc))
    for _ in range(draw(st.integers(1, 3))):
        parent, key = _pick(draw, doc)
        action = draw(st.sampled_from(["drop", "replace", "add"]))
        if action == "drop" and isinstance(parent, dict):
            parent.pop(key, None)
        elif action == "replace":
            parent[key] = draw(VALUES)
        elif isinstance(parent, dict):
            parent[draw(TEXT.filter(bool))] = draw(VALUES)
    return doc


def _pick(draw: st.DrawFn, node: Any) -> tuple[Any, Any]:
    """A (container, key) somewhere in `node`, going deeper while the draw says so."""
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            return node, 0 if isinstance(node, list) else "k"
        key = draw(st.sampled_from(keys))
        child = node[key]
        if not isinstance(child, dict | list) or not child or not draw(st.booleans()):
            if isinstance(node, list) and not isinstance(key, int):
                key = 0
            return node, key
        node = child


# ---- configs ------------------------------------------------------------------------------------

DEFAULTS = config.to_dict(config.Config())


@given(mutated(DEFAULTS))
def test_a_generated_config_loads_or_is_a_config_error(doc):
    try:
        config.from_dict(doc)
    except config.ConfigError:
        pass


@given(st.text(max_size=200))
def test_generated_config_text_loads_or_is_a_config_error(text):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "fsr.toml"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))  # a lone surrogate: bytes that are not UTF-8
        try:
            config.load(path)
        except config.ConfigError:
            pass


@st.composite
def valid_change(draw: st.DrawFn) -> tuple[str, str, Any]:
    """One field set to a value its type and range allow."""
    section = draw(st.sampled_from(sorted(DEFAULTS)))
    name = draw(st.sampled_from(sorted(DEFAULTS[section])))
    default = DEFAULTS[section][name]
    rng = config.RANGES.get(f"{section}.{name}", config.Range())
    low = -1e6 if rng.low is None else rng.low
    high = low + 1e6 if rng.high is None else rng.high
    if isinstance(default, bool):
        value: Any = draw(st.booleans())
    elif isinstance(default, int):
        value = draw(st.integers(math.ceil(low), math.floor(high)))
    elif isinstance(default, float):
        value = draw(st.floats(low, high, exclude_min=rng.open_low))
    else:
        value = default  # text fields have formats of their own: tested by example
    return section, name, value


@given(valid_change())
def test_a_value_within_its_type_and_range_loads_unchanged(change):
    section, name, value = change
    doc = json.loads(json.dumps(DEFAULTS))
    doc[section][name] = value
    assume(doc["eval"]["bench_min_samples"] <= doc["eval"]["bench_max_samples"])
    assume(doc["search"]["elites"] <= doc["search"]["population"])
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "fsr.toml"
        path.write_text(toml_text(doc))
        loaded = config.load(path)
    assert getattr(getattr(loaded, section), name) == value


# ---- candidate headers --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def softmax():
    return tasks.load("softmax")


def baseline_parts() -> tuple[dict[str, Any], str]:
    text = (SOFTMAX / "baseline.cu").read_text()
    match = candidate.HEADER_RE.search(text)
    assert match is not None
    return tomllib.loads(match.group(1)), text[match.end():]


HEADER, BODY = baseline_parts()


@given(mutated(HEADER))
def test_a_generated_header_parses_or_is_a_header_error(softmax, header):
    try:
        candidate.parse(f"/* fsr\n{toml_text(header)}*/{BODY}", softmax)
    except candidate.HeaderError:
        pass


@given(st.text(max_size=300))
def test_generated_header_text_parses_or_is_a_header_error(softmax, text):
    try:
        candidate.parse(f"/* fsr\n{text}\n*/{BODY}", softmax)
    except candidate.HeaderError:
        pass


@given(st.lists(st.integers(1, 2**20), min_size=1, max_size=6, unique=True), st.sampled_from(["0", "BLOCK * 4"]))
def test_a_generated_valid_header_parses_with_what_it_declares(softmax, blocks, smem):
    header = {**HEADER, "tunables": {"BLOCK": blocks}, "launch": [{**HEADER["launch"][0], "smem": smem}]}
    cand = candidate.parse(f"/* fsr\n{toml_text(header)}*/{BODY}", softmax)
    assert cand.tunables[0].values == tuple(blocks) and cand.launches[0].smem == smem


def test_the_writer_of_these_tests_reproduces_a_valid_header(softmax):
    """The unmutated header, written back by `toml_text`, still parses: the mutations are what fail."""
    cand = candidate.parse(f"/* fsr\n{toml_text(HEADER)}*/{BODY}", softmax)
    assert cand.launches[0].kernel == "softmax_baseline"


# ---- task.toml ----------------------------------------------------------------------------------

TASK_TOML = tomllib.loads((SOFTMAX / "task.toml").read_text())


@pytest.fixture(scope="module")
def task_dir():
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "generated"
        shutil.copytree(SOFTMAX, path)
        yield path


@given(mutated(TASK_TOML))
def test_a_generated_task_toml_loads_or_is_a_task_error(task_dir, doc):
    (task_dir / "task.toml").write_bytes(toml_text(doc).encode("utf-8", "surrogatepass"))  # "\ud800": not UTF-8
    try:
        tasks.load(task_dir)
    except tasks.TaskError:
        pass


def test_the_unmutated_task_toml_written_back_loads(task_dir):
    (task_dir / "task.toml").write_text(toml_text(TASK_TOML))
    assert tasks.load(task_dir).test_sizes == tasks.load("softmax").test_sizes


# ---- Parquet parts ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lineage_bytes():
    """Two evaluation parts of four rows each, as bytes, and the ids in each."""
    from tests.support.lineage_writes import parts, write_rows

    with tempfile.TemporaryDirectory() as d:
        write_rows(Path(d), 8, batch_rows=4)
        files = parts(Path(d))
        ids = [lineage.read_pandas(Path(d))["candidate_id"].tolist()[i * 4:i * 4 + 4] for i in range(2)]
        return [(f.name, f.read_bytes()) for f in files], ids


@given(st.data())
def test_a_damaged_part_never_stops_the_reader_and_the_other_part_is_read_whole(lineage_bytes, data):
    files, ids = lineage_bytes
    (name, good), (other, damaged) = files
    start = data.draw(st.integers(0, len(damaged)))
    how = data.draw(st.sampled_from(["truncate", "overwrite", "insert"]))
    junk = data.draw(st.binary(min_size=1, max_size=64))
    if how == "truncate":
        damaged = damaged[:start]
    elif how == "overwrite":
        damaged = damaged[:start] + junk + damaged[start + len(junk):]
    else:
        damaged = damaged[:start] + junk + damaged[start:]
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "evaluations").mkdir()
        (Path(d) / "evaluations" / name).write_bytes(good)
        (Path(d) / "evaluations" / other).write_bytes(damaged)
        read = set(lineage.read(d).column("candidate_id").to_pylist())
        lineage.compact(d, "evaluations")
        assert set(ids[0]) <= read and set(ids[0]) <= set(lineage.read(d).column("candidate_id").to_pylist())
