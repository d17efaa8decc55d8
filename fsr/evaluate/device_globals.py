"""A compiled module's module-scope device variables (`__device__` globals), read from its cubin.

Such variables persist from one launch to the next for as long as the module stays loaded, so a
kernel could keep results, counters or markers in them and tell a timed launch from a checked
one. fsr bounds their total size (guards.check_module: on the host at the static stage, from the
cubin, and again in the GPU child) and restores them before every launch sequence, checked or
timed (gpu.programs.Program.reset_globals): `.nv.global` (zero-initialised, NOBITS) is zeroed
and `.nv.global.init` gets back the bytes the loader wrote, copied right after the load: the
section's bytes in the cubin (`Section.image`) with the pointers in it filled in by the loader
(`.rela.nv.global.init`: a `__device__` pointer to a string literal is 0 in the cubin). Each
variable is restored on its own, at the address the loaded module gives its name
(`restore_spans`): the loader need not keep a section in one allocation (variables of different
alignments may land in different ones, next to each other or not), and a copy or memset that
runs from one allocation into the next is refused (cudaErrorInvalidValue).

`__constant__` variables (`.nv.constant3`: `constants`) are read the same way but restored only in
certification (gpu.strict): a kernel cannot write one through its name, but it can through a
generic pointer laundered in inline asm. A constant bank is one range the hardware addresses as
bank + offset, so it is restored whole, from one base (`bank_span`), padding included.

A cubin is an ELF64 file; this reads its section headers and symbol table with `struct`, no
CUDA (the parent, tests and the child all use it).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass

WRITABLE_SECTIONS = (".nv.global", ".nv.global.init")
CONSTANT_BANK = re.compile(r"^\.nv\.constant[1-9]\d*$")  # module-wide banks; .nv.constant0.K: kernel K's parameters
NOBITS = 8
STT_OBJECT = 1


class NotACubin(ValueError):
    """The bytes are not a 64-bit little-endian ELF file."""


@dataclass(frozen=True)
class Symbol:
    """A variable in a writable section: its name (as the driver looks it up), offset and size."""

    name: str
    offset: int
    size: int


@dataclass(frozen=True)
class Section:
    """One writable section: its size, its initial image as the cubin holds it, before the
    loader fills in pointers (None: zero-initialised), and the variables in it."""

    name: str
    size: int
    image: bytes | None
    symbols: tuple[Symbol, ...]


@dataclass(frozen=True)
class Span:
    """One variable's restore: `size` bytes at device `address`, from `offset` in its section's
    initial image (zeroed where the section has none)."""

    address: int
    offset: int
    size: int


def restore_spans(section: Section, placed: Mapping[str, int]) -> tuple[Span, ...] | None:
    """The restore of `section`, one span per variable, each exactly the variable's bytes at the
    address the loaded module gives its name (`placed`); None when a variable of it has no address
    there, or the section holds bytes but names no variable: what fsr cannot locate it cannot
    restore, and the module is refused (guards.check_module), never restored by a guess. Spans
    never join: two variables side by side in the section may lie in two allocations."""
    if section.size and not section.symbols:
        return None
    if any(sym.name not in placed for sym in section.symbols):
        return None
    return tuple(Span(placed[sym.name], sym.offset, sym.size) for sym in section.symbols if sym.size)


@dataclass(frozen=True)
class ModuleGlobals:
    sections: tuple[Section, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self.sections)

    def names(self) -> list[str]:
        return [sym.name for s in self.sections for sym in s.symbols]


def bank_span(section: Section, placed: Mapping[str, int]) -> Span | None:
    """A constant bank's restore: the whole section from the base its variables' addresses give
    (each address less its offset); None when no variable has an address, or two give different
    bases (a bank is one range: fsr restores it from a base it has found, never a guess)."""
    bases = {placed[sym.name] - sym.offset for sym in section.symbols if sym.name in placed}
    if len(bases) != 1 or not section.size:
        return None
    return Span(bases.pop(), 0, section.size)


def read(cubin: bytes) -> ModuleGlobals:
    """The writable module-scope sections of a cubin, with their variables."""
    return _sections(cubin, lambda name: name in WRITABLE_SECTIONS)


def constants(cubin: bytes) -> ModuleGlobals:
    """The module-wide constant banks of a cubin that name variables (`__constant__`), with
    their images as the cubin holds them (before the loader fills in pointers)."""
    banks = _sections(cubin, lambda name: CONSTANT_BANK.match(name) is not None)
    return ModuleGlobals(tuple(s for s in banks.sections if s.symbols))


def _sections(cubin: bytes, wanted_name: Callable[[str], bool]) -> ModuleGlobals:
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise NotACubin("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx]

    def string(table: tuple, at: int) -> str:
        start = table[4] + at
        return cubin[start:cubin.index(b"\0", start)].decode(errors="replace")

    section_names = [string(names, h[0]) for h in headers]
    wanted = {i: n for i, n in enumerate(section_names) if wanted_name(n)}
    symbols: dict[int, list[Symbol]] = {i: [] for i in wanted}
    for h in headers:
        if h[1] != 2:  # SHT_SYMTAB
            continue
        strtab = headers[h[6]]
        for k in range(h[5] // h[9]):
            st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", cubin, h[4] + k * h[9])
            if st_shndx in wanted and st_info & 0xF == STT_OBJECT:
                symbols[st_shndx].append(Symbol(string(strtab, st_name), st_value, st_size))
    return ModuleGlobals(tuple(
        Section(name, headers[i][5], None if headers[i][1] == NOBITS else cubin[headers[i][4]:headers[i][4] + headers[i][5]],
                tuple(sorted(symbols[i], key=lambda s: s.offset)))
        for i, name in sorted(wanted.items())))

