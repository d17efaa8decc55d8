"""Tensor maps on the host, with no GPU: a `[[tensormap]]` table read, and every rule of the
driver's encoder that fsr checks before encoding, each with a map it must refuse (one line
naming the rule) and the nearest map it must let through."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fsr import tensormap
from fsr.tensormap import MapError
from fsr.types import TensorMap

# A 2-d bfloat16 map over a (rows, cols) row-major buffer: 64 x 64 boxes, 128-byte rows.
BASE = TensorMap("tiles", "x", dims=("cols", "rows"), box=("64", "64"), swizzle="128B")
SIZES = {"rows": 128, "cols": 256}


def resolved(tmap: TensorMap = BASE, sizes: dict | None = None, dtype: str = "bfloat16",
             elements: int | None = None) -> tensormap.Resolved:
    names = sizes or SIZES
    return tensormap.resolve(tmap, names, dtype, names["rows"] * names["cols"] if elements is None else elements)


def test_a_table_becomes_a_map_and_back():
    table = {"name": "tiles", "buffer": "x", "dims": ["cols", "rows"], "box": ["64", 64], "swizzle": "128B",
             "strides": ["cols"], "oob_fill": "nan", "l2_promotion": "128B"}
    tmap = tensormap.from_table(table)
    assert tmap == TensorMap("tiles", "x", ("cols", "rows"), ("64", "64"), strides=("cols",), swizzle="128B",
                             l2_promotion="128B", oob_fill="nan")
    assert tensormap.from_table(tensormap.to_table(tmap)) == tmap
    assert "interleave" not in tensormap.to_table(tmap)  # defaults are left out


@pytest.mark.parametrize(("table", "reason"), [
    ({"name": "t", "buffer": "x", "dims": ["n"]}, "missing box"),
    ({"name": "t", "buffer": "x", "dims": ["n"], "box": ["8"], "shape": ["n"]}, "unknown key\\(s\\) shape"),
    ({"name": "t", "buffer": "x", "dims": ["n"], "box": ["8"], "swizzle": "256B"}, "swizzle '256B' is not one of"),
    ({"name": "t", "buffer": "x", "dims": ["n"], "box": ["8"], "interleave": "8B"}, "interleave '8B'"),
    ({"name": "t", "buffer": "x", "dims": ["n"], "box": ["8"], "oob_fill": "one"}, "oob_fill 'one'"),
    ({"name": "t", "buffer": "x", "dims": ["n"], "box": ["8"], "l2_promotion": "32B"}, "l2_promotion '32B'"),
    ({"name": "t", "buffer": "x", "dims": ["n +"], "box": ["8"]}, "cannot parse"),
])
def test_a_table_that_cannot_be_read_is_refused(table, reason):
    with pytest.raises(MapError, match=reason):
        tensormap.from_table(table)


def test_the_map_at_a_size_holds_the_encoders_arguments():
    r = resolved()
    assert (r.element_type, r.dims, r.strides_bytes, r.box, r.element_strides) == \
        ("BFLOAT16", (256, 128), (512,), (64, 64), (1, 1))
    assert resolved(replace(BASE, strides=("cols + 8",)), elements=128 * 264).strides_bytes == (528,)
    packed = TensorMap("t", "x", ("a", "b", "c"), ("4", "4", "4"))
    assert tensormap.resolve(packed, {"a": 8, "b": 3, "c": 5}, "float32", 120).strides_bytes == (32, 96)
    fp8 = tensormap.resolve(TensorMap("t", "x", ("n",), ("16",)), {"n": 64}, "float8_e4m3fn", 64)
    assert fp8.element_type == "UINT8"  # the copy engine moves bytes


# (what breaks a rule, the rule's words) beside (the nearest map that keeps it)
CASES = [
    ("rank 6", replace(BASE, dims=("2",) * 6, box=("8",) * 6), "rank 6; a tensor map has 1 to 5",
     replace(BASE, dims=("8",) * 5, box=("8",) * 5, swizzle="none")),
    ("box of another rank", replace(BASE, box=("64",)), "box lists 1 values, a map of rank 2 needs 2", BASE),
    ("strides of another rank", replace(BASE, strides=("cols", "cols")), "strides lists 2 values",
     replace(BASE, strides=("cols",))),
    ("element strides of another rank", replace(BASE, element_strides=("1",)), "element_strides lists 1",
     replace(BASE, element_strides=("1", "2"))),
    ("interleave below rank 3", replace(BASE, interleave="16B", swizzle="none"), "interleave 16B needs rank 3",
     replace(BASE, dims=("cols", "rows", "1"), box=("64", "64", "1"), interleave="16B", swizzle="none")),
    ("interleave 32B without its swizzle", replace(BASE, dims=("cols", "rows", "1"), box=("16", "8", "1"),
                                                   interleave="32B", swizzle="none"), "needs swizzle 32B",
     replace(BASE, dims=("cols", "rows", "1"), box=("16", "8", "1"), interleave="32B", swizzle="32B")),
    ("a dimension of zero", replace(BASE, dims=("cols", "rows - 128")), "dims\\[1\\] = 0",
     replace(BASE, dims=("cols", "rows - 127"))),
    ("a stride not a multiple of 16 bytes", replace(BASE, dims=("cols - 1", "rows"), strides=("cols - 1",)),
     "stride of dimension 1 is 510 bytes .* multiple of 16", replace(BASE, dims=("cols - 8", "rows"),
                                                                     strides=("cols - 8",))),
    ("a stride of 2^40 bytes", replace(BASE, dims=("cols", "2"), strides=("2**39",)), "below 2\\^40",
     replace(BASE, dims=("cols", "2"), strides=("2**39 - 8",))),
    ("interleave 32B with a 16-byte stride", replace(BASE, dims=("8", "rows", "2"), box=("16", "8", "1"),
                                                     strides=("8", "8 * rows"), interleave="32B", swizzle="32B"),
     "multiple of 32 bytes", replace(BASE, dims=("16", "rows", "2"), box=("16", "8", "1"), strides=("16", "16 * rows"),
                                     interleave="32B", swizzle="32B")),
    ("a box of 257", replace(BASE, box=("64", "257")), "box\\[1\\] = 257", replace(BASE, box=("64", "256"))),
    ("a box of 0", replace(BASE, box=("64", "0")), "box\\[1\\] = 0", replace(BASE, box=("64", "1"))),
    ("an element stride of 9", replace(BASE, element_strides=("1", "9")), "element_strides\\[1\\] = 9",
     replace(BASE, element_strides=("1", "8"))),
    ("an inner box of 14 bytes", replace(BASE, box=("7", "64")), "inner extent is 14 bytes .* multiple of 16",
     replace(BASE, box=("8", "64"))),
    ("an inner box wider than the swizzle", replace(BASE, box=("64", "64"), swizzle="64B"),
     "128 bytes, wider than the 64B swizzle span", replace(BASE, box=("32", "64"), swizzle="64B")),
    ("a 256-byte box under the 128B swizzle", replace(BASE, box=("128", "8")), "wider than the 128B",
     replace(BASE, box=("128", "8"), swizzle="none")),
    ("an unknown size", replace(BASE, box=("BM", "64")), "unknown name 'BM'", replace(BASE, box=("cols // 4", "64"))),
]


@pytest.mark.parametrize(("what", "bad", "reason", "good"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_refuses_a_map_that_breaks_it_and_passes_one_that_keeps_it(what, bad, reason, good):
    elements = 2**41  # as large as any map here reaches: the buffer's bound is tested apart
    with pytest.raises(MapError, match=reason) as refused:
        resolved(bad, elements=elements)
    assert "\n" not in str(refused.value) and str(refused.value).startswith("tensormap tiles: ")
    resolved(good, elements=elements)


def test_nan_fill_needs_a_float_element_type():
    nan = replace(BASE, oob_fill="nan", swizzle="none", box=("4", "4"))
    with pytest.raises(MapError, match="oob_fill nan needs a float element type, buffer x is int32"):
        resolved(nan, dtype="int32")
    assert resolved(nan, dtype="float32").oob_fill == "nan"


def test_a_map_that_reaches_past_its_buffer_is_refused():
    with pytest.raises(MapError, match="reach element 33023 of buffer x, which holds 32768"):
        resolved(replace(BASE, dims=("cols", "rows + 1")))
    with pytest.raises(MapError, match="reach element"):  # a stride that skips past the end
        resolved(replace(BASE, strides=("cols + 8",)))
    resolved(replace(BASE, dims=("cols", "rows")))  # exactly the buffer
    resolved(replace(BASE, dims=("cols // 2", "rows")), elements=256 * 127 + 128)  # the last row's first half


def test_every_buffer_dtype_has_an_element_type_and_another_dtype_is_refused():
    from fsr.dtypes import DTYPES

    assert set(tensormap.ELEMENT_TYPES) == set(DTYPES)  # a dtype added later needs its element type here
    with pytest.raises(MapError, match="buffer x of complex64 has no tensor-map element type"):
        resolved(dtype="complex64")
