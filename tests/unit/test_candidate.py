import dataclasses

import pytest

from fsr import candidate, tasks
from fsr.types import Candidate

SOFTMAX = tasks.load("softmax")


def cu(header: str, body: str = "") -> str:
    body = body or 'extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {}'
    return f"/* fsr\n{header}\n*/\n{body}\n"


GOOD = """
[tunables]
BLOCK = [256, 128]
[features]
VEC4 = [0, 1]
[[launch]]
kernel = "k"
grid = ["cdiv(rows, BLOCK)"]
block = ["BLOCK"]
args = ["x", "y", "rows", "cols"]
"""


def test_parses_header_and_resolves_defaults():
    c = candidate.parse(cu(GOOD), SOFTMAX)
    assert c.launches[0].kernel == "k" and c.tunables[0].values == (256, 128)
    assert c.resolved_defines() == (("BLOCK", 256), ("VEC4", 0))
    assert candidate.launch_dims(c, {"rows": 1000, "cols": 3}) == [((4,), (256,), 0)]


def test_id_is_a_content_hash_ignoring_lineage():
    c = candidate.parse(cu(GOOD), SOFTMAX)
    assert c.id == dataclasses.replace(c, parents=("p",), island=3, generation=9).id
    assert c.id != candidate.with_defines(c, {"BLOCK": 128}).id
    assert c.id == candidate.with_defines(c, {"BLOCK": 256}).id  # the default, spelled out
    assert c.id != dataclasses.replace(c, source=c.source + "\n").id
    hash(c)


@pytest.mark.parametrize("header,body,message", [
    ("", "", "declares no"),
    ("[[launch]]\nkernel = 'k'\ngrid = [1]\nblock = [1]", "", "missing args"),
    ("[[launch]]\nkernel = 'nope'\ngrid = [1]\nblock = [1]\nargs = ['x', 'y', 'rows', 'cols']", "", "no __global__"),
    ("[[launch]]\nkernel = 'k'\ngrid = [1]\nblock = [1]\nargs = ['x', 'y', 'rows']", "", "takes 4 parameters"),
    ("[[launch]]\nkernel = 'k'\ngrid = [1]\nblock = [1]\nargs = ['rows', 'y', 'x', 'cols']", "", "is a scalar but its parameter is a pointer"),
    ("[[launch]]\nkernel = 'k'\ngrid = [1]\nblock = [1]\nargs = ['x', 'y', 'rows', 'z']", "", "not a task buffer"),
    ("[[launch]]\nkernel = 'k'\ngrid = ['rows - 5']\nblock = [1]\nargs = ['x', 'y', 'rows', 'cols']", "", "not a valid launch"),
    ("[[launch]]\nkernel = 'k'\ngrid = ['R']\nblock = [1]\nargs = ['x', 'y', 'rows', 'cols']", "", "unknown name 'R'"),
    ("[tunables]\nB = []\n[[launch]]\nkernel = 'k'\ngrid = [1]\nblock = [1]\nargs = ['x', 'y', 'rows', 'cols']", "", "non-empty"),
    ("[oops]\n", "", "unknown header section"),
    ("[[launch]\n", "", "not valid TOML"),
])
def test_rejects_malformed_headers_with_a_reason(header, body, message):
    with pytest.raises(candidate.HeaderError, match=message):
        candidate.parse(cu(header, body), SOFTMAX)


def test_missing_header():
    with pytest.raises(candidate.HeaderError, match="no '/\\* fsr"):
        candidate.parse("__global__ void k() {}", SOFTMAX)


def test_render_round_trips():
    text = candidate.render('extern "C" __global__ void k(const float* x, float* y, int rows, int cols) {}',
                           {"BLOCK": [128, 256]},
                           [{"kernel": "k", "grid": ["cdiv(rows, BLOCK)"], "block": ["BLOCK"],
                             "args": ["x", "y", "rows", "cols"]}], features={"VEC4": [0, 1]})
    c = candidate.parse(text, SOFTMAX)
    assert isinstance(c, Candidate) and c.features[0].name == "VEC4" and c.tunables[0].values == (128, 256)


def test_with_defines_refuses_unknown_names():
    c = candidate.parse(cu(GOOD), SOFTMAX)
    with pytest.raises(candidate.HeaderError):
        candidate.with_defines(c, {"NOPE": 1})


def test_export_makes_chosen_values_the_defaults_and_keeps_the_code():
    c = candidate.parse(cu(GOOD), SOFTMAX)
    text = candidate.export(c, (("BLOCK", 128), ("VEC4", 1)))
    again = candidate.parse(text, SOFTMAX)
    assert again.resolved_defines() == (("BLOCK", 128), ("VEC4", 1))
    assert again.tunables[0].values == (128, 256) and again.launches == c.launches
    assert "__global__ void k" in text
