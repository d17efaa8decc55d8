"""Module-scope device variables read from cubins NVRTC compiles here (no GPU): what each section
holds, the initial image restored before every launch sequence, and the bound that REJECTs a
module whose variables could hold a results table."""

from __future__ import annotations

import dataclasses

import pytest

from fsr import candidate, tasks
from fsr.evaluate import device_globals, guards
from tests.adversarial.corpus import side_channels
from tests.support.kernels import cubin

SOURCE = r"""
__device__ unsigned counter;
__device__ float table[1024];
__device__ int init_tab[4] = {1, 2, 3, 4};
static __device__ long long hidden[3];
namespace ns { __device__ short inner[5]; }
__constant__ float cst[8];
extern "C" __global__ void k(float* y) {
    counter++; table[threadIdx.x] = y[0]; hidden[0] += init_tab[threadIdx.x & 3]; ns::inner[0] = 1; y[1] = cst[0];
}
"""


def test_every_writable_variable_is_found_with_its_size_and_initial_image():
    module = device_globals.read(cubin(SOURCE))
    sections = {s.name: s for s in module.sections}
    zeroed, initialised = sections[".nv.global"], sections[".nv.global.init"]
    assert initialised.image == bytes([1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0])
    assert zeroed.image is None  # NOBITS: zeroed on reset
    sizes = {sym.name: sym.size for s in module.sections for sym in s.symbols}
    assert sizes["counter"] == 4 and sizes["table"] == 4096 and sizes["init_tab"] == 16 and sizes["hidden"] == 24
    assert any("inner" in name for name in sizes)  # mangled: the name the driver looks up
    assert "cst" not in sizes  # __constant__: kernels cannot write it
    for s in module.sections:  # every variable lies inside its section: a whole-section reset covers it
        assert all(0 <= sym.offset and sym.offset + sym.size <= s.size for sym in s.symbols)
    assert module.total_bytes == zeroed.size + initialised.size >= 4 + 4096 + 16 + 24 + 10


def test_a_module_without_variables_has_nothing_to_reset():
    module = device_globals.read(cubin('extern "C" __global__ void k(float* y) { y[0] = 1.0f; }'))
    assert module.total_bytes == 0 and module.names() == []
    assert guards.check_module(module) is None


def test_bytes_that_are_not_a_cubin_are_refused():
    with pytest.raises(device_globals.NotACubin):
        device_globals.read(b"\x7fELF" + b"\0" * 10)


def test_the_bound_admits_counters_and_flags_and_refuses_a_table():
    assert guards.check_module(device_globals.read(cubin(SOURCE))) is None  # 4 KiB and change
    big = "__device__ float stash[8192];\nextern \"C\" __global__ void k(float* y) { stash[threadIdx.x] = y[0]; }"
    reason = guards.check_module(device_globals.read(cubin(big)))
    assert reason is not None and "__device__" in reason and "module" in reason and "32768 bytes" in reason


CORPUS = {c.name: c for c, _ in side_channels()}


@pytest.mark.parametrize("name", sorted(n for n, c in CORPUS.items() if "module-global-bound" in c.caught_by))
def test_the_corpus_global_tables_are_over_the_bound_and_their_twins_under(name, compiler):
    cheat = CORPUS[name]
    task = tasks.load(cheat.task)
    compiled = compiler.compile(candidate.parse(cheat.path.read_text(), task), "sm_90")
    reason = guards.check_module(device_globals.read(compiled.cubin))
    assert reason is not None and "__device__" in reason
    twin = cheat.path.with_name(cheat.path.stem + ".twin.cu")
    honest = compiler.compile(candidate.parse(twin.read_text(), task), "sm_90")
    assert guards.check_module(device_globals.read(honest.cubin)) is None


def test_a_launch_counter_is_within_the_bound(compiler):
    cheat = CORPUS["sgemm/launch_count"]
    task = tasks.load(cheat.task)
    compiled = compiler.compile(candidate.parse(cheat.path.read_text(), task), "sm_90")
    module = device_globals.read(compiled.cubin)
    assert module.total_bytes >= 4 and guards.check_module(module) is None  # reset, not refused


def test_variables_fsr_cannot_locate_are_refused():
    reason = guards.check_module(device_globals.ModuleGlobals(), (".nv.global",))
    assert reason is not None and "__device__" in reason and "reset" in reason


def test_the_bound_is_what_the_guard_says():
    module = device_globals.ModuleGlobals((device_globals.Section(".nv.global", guards.MAX_MODULE_GLOBAL_BYTES, None, ()),))
    assert guards.check_module(module) is None
    over = dataclasses.replace(module.sections[0], size=guards.MAX_MODULE_GLOBAL_BYTES + 1)
    assert guards.check_module(device_globals.ModuleGlobals((over,))) is not None
