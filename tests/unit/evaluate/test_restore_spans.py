"""The restore of module-scope variables, computed on the host (fsr.evaluate.device_globals
.restore_spans) from cubins NVRTC compiles here (no GPU): one span per variable, each exactly
the variable's bytes at the address the loaded module gives its name. A span over the whole
section, from its first variable's address, ran from one allocation into the next where the
loader placed variables of different alignments apart, and the restore of a module with
`unsigned long long` and `float` arrays failed (cudaErrorInvalidValue) as the kernel's CRASH."""

from __future__ import annotations

import struct

import pytest

from fsr.evaluate import device_globals
from fsr.evaluate.device_globals import Section, Span, Symbol, restore_spans

TWO_TYPES = r"""
__device__ unsigned long long a[128];
__device__ float b[128];
extern "C" __global__ void k(float* y) { a[threadIdx.x] += threadIdx.x; b[threadIdx.x] = y[0]; y[1] = a[0] + b[1]; }
"""
INITIALISED = r"""
__device__ char tag[3] = {7, 8, 9};
__device__ double scale = 2.5;
__device__ int table[4] = {1, 2, 3, 4};
extern "C" __global__ void k(float* y) { tag[0]++; scale += 1.0; table[threadIdx.x & 3] += tag[1]; y[0] = scale + table[0]; }
"""


def cubin(source: str) -> bytes:
    from cupy_backends.cuda.libs import nvrtc

    prog = nvrtc.createProgram(source, "m.cu", [], [])
    try:
        nvrtc.compileProgram(prog, ["--gpu-architecture=sm_90"])
        return nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)


def only_section(source: str) -> Section:
    sections = device_globals.read(cubin(source)).sections
    assert len(sections) == 1, sections
    return sections[0]


def covered(spans: tuple[Span, ...]) -> list[tuple[int, int]]:
    return sorted((s.address, s.address + s.size) for s in spans)


def test_two_element_types_are_restored_one_variable_at_a_time():
    section = only_section(TWO_TYPES)
    sizes = {sym.name: (sym.offset, sym.size) for sym in section.symbols}
    assert sizes == {"a": (0, 1024), "b": (1024, 512)} and section.size == 1536
    base = 0x7F0000000000
    # laid out as in the cubin, the way the restore over the whole section assumed they lay
    # in one allocation; they may not, so no span may cover more than one variable
    spans = restore_spans(section, {"a": base, "b": base + 1024})
    assert spans == (Span(base, 0, 1024), Span(base + 1024, 1024, 512))
    assert all(s.size < section.size for s in spans)


def test_spans_follow_where_the_loader_put_each_variable():
    section = only_section(TWO_TYPES)
    spans = restore_spans(section, {"a": 0x5000, "b": 0x1000})  # apart, and in the other order
    assert covered(spans) == [(0x1000, 0x1000 + 512), (0x5000, 0x5000 + 1024)]


def test_initial_images_are_taken_from_each_variables_own_bytes():
    section = only_section(INITIALISED)
    assert section.name == ".nv.global.init" and section.image is not None
    placed = {sym.name: 0x9000 + 64 * i for i, sym in enumerate(section.symbols)}
    spans = restore_spans(section, placed)
    assert spans is not None and len(spans) == 3
    images = {sym.name: section.image[span.offset:span.offset + span.size] for sym, span in zip(section.symbols, spans, strict=True)}
    assert images == {"tag": bytes([7, 8, 9]), "scale": struct.pack("<d", 2.5), "table": struct.pack("<4i", 1, 2, 3, 4)}
    assert all(span.address == placed[sym.name] for sym, span in zip(section.symbols, spans, strict=True))


def test_a_variable_without_an_address_makes_the_section_unrestorable_not_guessed():
    section = only_section(TWO_TYPES)
    assert restore_spans(section, {"a": 0x1000}) is None  # b would be guessed at 0x1000 + 1024
    assert restore_spans(section, {}) is None
    assert restore_spans(Section(".nv.global", 64, None, ()), {}) is None  # bytes, no name to place them by


@pytest.mark.parametrize("size", [0, 4])
def test_empty_variables_need_no_restore(size):
    section = Section(".nv.global", size, None, (Symbol("empty", 0, 0),) + ((Symbol("x", 0, 4),) if size else ()))
    spans = restore_spans(section, {"empty": 0x1000, "x": 0x1000})
    assert spans == ((Span(0x1000, 0, 4),) if size else ())


POINTERS = r"""
__device__ const char* tags[2] = {"soft", "max"};
extern "C" __global__ void k(char* y) { y[threadIdx.x] = tags[blockIdx.x & 1][threadIdx.x & 3]; }
"""


def test_the_cubins_image_of_a_pointer_is_not_what_the_loader_writes():
    """Why the GPU child restores initialised variables from a copy of the loaded bytes: in the
    cubin, a `__device__` pointer to a string literal is 0 until the loader fills it in (a
    relocation), so the cubin's image put back would point the kernel at address 0."""
    data = cubin(POINTERS)
    section = only_section(POINTERS)
    assert section.name == ".nv.global.init" and section.image is not None
    tags = next(sym for sym in section.symbols if sym.name == "tags")
    assert section.image[tags.offset:tags.offset + tags.size] == bytes(16)
    assert b".rela.nv.global.init" in data
    strings = [sym for sym in section.symbols if sym.name.startswith("$str")]
    assert sorted(section.image[s.offset:s.offset + s.size] for s in strings) == [b"max\0", b"soft\0"]
