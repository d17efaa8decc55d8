"""Tensor maps a candidate's header asks for: read from `[[tensormap]]` tables, and checked at a
size against the rules of the driver's `cuTensorMapEncodeTiled`, here, with no GPU.

A map describes a tiled view of one of the launch's buffers for the tensor memory accelerator
(`cp.async.bulk.tensor`): the buffer's dimensions and strides, the box one copy moves, the
shared-memory swizzle. fsr encodes it on the host (fsr.evaluate.gpu.launch_ex) for every buffer
the launch is given and passes it by value, as a `const __grid_constant__ CUtensorMap`
parameter; the candidate never builds one. Everything is checked before a map is encoded, so a
map that cannot be made is the header's one-line error, not a driver's code at run time.

    [[tensormap]]
    name = "a_tiles"        # named in a launch's args where the kernel takes the map
    buffer = "A"            # a task buffer or a [[scratch]] buffer; its dtype is the element type
    dims = ["K", "M"]       # innermost first, in elements
    box = ["64", "BM"]      # elements one copy moves along each dimension
    strides = ["K"]         # optional: elements between neighbours along dims 1.. (default packed)
    swizzle = "128B"        # optional: none (default), 32B, 64B, 128B
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fsr import dtypes, expr
from fsr.types import TensorMap

MAX_RANK = 5
MAX_BOX = 256
MAX_ELEMENT_STRIDE = 8
MAX_DIM = 2**32
MAX_STRIDE_BYTES = 2**40
SWIZZLE_BYTES = {"none": 0, "32B": 32, "64B": 64, "128B": 128}
INTERLEAVES = ("none", "16B", "32B")
L2_PROMOTIONS = ("none", "64B", "128B", "256B")
OOB_FILLS = ("zero", "nan")
# The driver's element type for each buffer dtype fsr has (fsr.dtypes.DTYPES): the copy engine
# moves bytes, so the 8-bit floats travel as UINT8; FLOAT16 and BFLOAT16 as themselves.
ELEMENT_TYPES = {"float32": "FLOAT32", "float64": "FLOAT64", "int32": "INT32", "int64": "INT64",
                 "uint32": "UINT32", "int8": "UINT8", "uint8": "UINT8", "bfloat16": "BFLOAT16",
                 "float16": "FLOAT16", "float8_e4m3fn": "UINT8", "float8_e5m2": "UINT8"}
FLOAT_TYPES = frozenset({"FLOAT32", "FLOAT64", "BFLOAT16", "FLOAT16"})
KEYS = ("name", "buffer", "dims", "box")
OPTIONAL = ("strides", "element_strides", "swizzle", "interleave", "l2_promotion", "oob_fill")


class MapError(ValueError):
    """A `[[tensormap]]` table that cannot be read, or a map that cannot be made at a size."""


@dataclass(frozen=True)
class Resolved:
    """A map at one size: the arguments of `cuTensorMapEncodeTiled` but the address."""

    name: str
    buffer: str
    element_type: str  # a CU_TENSOR_MAP_DATA_TYPE_ suffix
    dims: tuple[int, ...]
    strides_bytes: tuple[int, ...]  # rank - 1 of them
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: str
    interleave: str
    l2_promotion: str
    oob_fill: str


def from_table(table: dict) -> TensorMap:
    """A TensorMap from one `[[tensormap]]` table; raises MapError naming the problem."""
    name = str(table.get("name", "?"))
    missing = [k for k in KEYS if k not in table]
    if missing:
        raise MapError(f"[[tensormap]] {name} is missing {', '.join(missing)}")
    extra = set(table) - set(KEYS) - set(OPTIONAL)
    if extra:
        raise MapError(f"[[tensormap]] {name} has unknown key(s) {', '.join(sorted(extra))}")
    lists = {k: _expressions(name, k, table[k]) for k in ("dims", "box", "strides", "element_strides") if k in table}
    words = {k: str(table.get(k, default)) for k, default in
             (("swizzle", "none"), ("interleave", "none"), ("l2_promotion", "none"), ("oob_fill", "zero"))}
    for key, allowed in (("swizzle", tuple(SWIZZLE_BYTES)), ("interleave", INTERLEAVES),
                         ("l2_promotion", L2_PROMOTIONS), ("oob_fill", OOB_FILLS)):
        if words[key] not in allowed:
            raise MapError(f"tensormap {name}: {key} {words[key]!r} is not one of {', '.join(allowed)}")
    return TensorMap(name, str(table["buffer"]), lists["dims"], lists["box"], lists.get("strides", ()),
                     lists.get("element_strides", ()), **words)


def to_table(tmap: TensorMap) -> dict[str, object]:
    """The `[[tensormap]]` table of a map, its optional keys only where not the default."""
    table: dict[str, object] = {"name": tmap.name, "buffer": tmap.buffer, "dims": list(tmap.dims),
                                "box": list(tmap.box)}
    defaults = TensorMap("", "", (), ())
    for key in OPTIONAL:
        value = getattr(tmap, key)
        if value != getattr(defaults, key):
            table[key] = list(value) if isinstance(value, tuple) else value
    return table


def _expressions(name: str, key: str, value: object) -> tuple[str, ...]:
    values = value if isinstance(value, list) else [value]
    out = tuple(str(v) for v in values)
    for v in out:
        try:
            expr.names_in(v)
        except expr.ExprError as e:
            raise MapError(f"tensormap {name}: {key}: {e}") from None
    return out


def resolve(tmap: TensorMap, names: dict[str, int], dtype: str, elements: int) -> Resolved:
    """The map at these sizes and tunables (`names`) over a buffer of `elements` elements of
    `dtype`, checked against every rule the driver's encoder states; raises MapError with one line
    saying which rule it breaks."""
    where = f"tensormap {tmap.name}"
    try:
        dims, box = _ints(tmap.dims, names), _ints(tmap.box, names)
        strides = _ints(tmap.strides, names) if tmap.strides else _packed(dims)
        element_strides = _ints(tmap.element_strides, names) if tmap.element_strides else (1,) * len(dims)
    except (ValueError, ArithmeticError) as e:  # ExprError; inf or NaN has no integer value
        raise MapError(f"{where}: {e}") from None
    element_type = ELEMENT_TYPES.get(dtype)
    if element_type is None:
        raise MapError(f"{where}: buffer {tmap.buffer} of {dtype} has no tensor-map element type")
    size = dtypes.numpy_dtype(dtype).itemsize
    rank = len(dims)
    _check_shape(where, tmap, rank, box, strides, element_strides)
    _check_values(where, dims, box, strides, element_strides, size, tmap)
    if tmap.oob_fill == "nan" and element_type not in FLOAT_TYPES:
        raise MapError(f"{where}: oob_fill nan needs a float element type, buffer {tmap.buffer} is {dtype}")
    reach = 1 + sum((d - 1) * s for d, s in zip(dims, (1,) + strides, strict=True))
    if reach > elements:
        raise MapError(f"{where}: dims {list(dims)} with strides {list(strides)} reach element {reach - 1} of "
                       f"buffer {tmap.buffer}, which holds {elements}")
    return Resolved(tmap.name, tmap.buffer, element_type, dims, tuple(s * size for s in strides), box,
                    element_strides, tmap.swizzle, tmap.interleave, tmap.l2_promotion, tmap.oob_fill)


def _ints(texts: tuple[str, ...], names: dict[str, int]) -> tuple[int, ...]:
    return tuple(expr.evaluate_int(t, names) for t in texts)


def _packed(dims: tuple[int, ...]) -> tuple[int, ...]:
    """Strides (elements) of dimensions 1.. of a dense array whose dimension 0 is contiguous."""
    return tuple(math.prod(dims[:i]) for i in range(1, len(dims)))


def _check_shape(where: str, tmap: TensorMap, rank: int, box: tuple[int, ...], strides: tuple[int, ...],
                 element_strides: tuple[int, ...]) -> None:
    if not 1 <= rank <= MAX_RANK:
        raise MapError(f"{where}: rank {rank}; a tensor map has 1 to {MAX_RANK} dimensions")
    for key, got, want in (("box", len(box), rank), ("strides", len(strides), rank - 1),
                           ("element_strides", len(element_strides), rank)):
        if got != want:
            raise MapError(f"{where}: {key} lists {got} values, a map of rank {rank} needs {want}")
    if tmap.interleave != "none" and rank < 3:
        raise MapError(f"{where}: interleave {tmap.interleave} needs rank 3 or more, the map has {rank}")
    if tmap.interleave == "32B" and tmap.swizzle != "32B":
        raise MapError(f"{where}: interleave 32B needs swizzle 32B, not {tmap.swizzle}")


def _check_values(where: str, dims: tuple[int, ...], box: tuple[int, ...], strides: tuple[int, ...],
                  element_strides: tuple[int, ...], size: int, tmap: TensorMap) -> None:
    for i, d in enumerate(dims):
        if not 1 <= d <= MAX_DIM:
            raise MapError(f"{where}: dims[{i}] = {d}; each dimension is 1 to 2^32 elements")
    align = 32 if tmap.interleave == "32B" else 16
    for i, s in enumerate(strides, start=1):
        if s * size % align or not 0 < s * size < MAX_STRIDE_BYTES:
            raise MapError(f"{where}: the stride of dimension {i} is {s * size} bytes ({s} elements of {size}); "
                           f"the copy engine needs a multiple of {align} bytes below 2^40 (run another launch at "
                           "such sizes: a launch's `when`)")
    for i, b in enumerate(box):
        if not 1 <= b <= MAX_BOX:
            raise MapError(f"{where}: box[{i}] = {b}; each box dimension is 1 to {MAX_BOX} elements")
    for i, e in enumerate(element_strides):
        if not 1 <= e <= MAX_ELEMENT_STRIDE:
            raise MapError(f"{where}: element_strides[{i}] = {e}; each is 1 to {MAX_ELEMENT_STRIDE}")
    inner = box[0] * size
    if tmap.interleave == "none" and inner % 16:
        raise MapError(f"{where}: the box's inner extent is {inner} bytes ({box[0]} x {size}); it must be a "
                       "multiple of 16 bytes")
    span = SWIZZLE_BYTES[tmap.swizzle]
    if tmap.interleave == "none" and span and inner > span:
        raise MapError(f"{where}: the box's inner extent is {inner} bytes, wider than the {tmap.swizzle} swizzle "
                       f"span ({span} bytes)")
