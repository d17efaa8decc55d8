"""The memory-bound templates' newer switches on the host, no GPU: what each promises shows in
the PTX that NVRTC compiles for sm_90. EVICT_HINT (rmsnorm, rmsnorm_bf16, layernorm, gemv) makes
evict_last and evict_first policies and loads through them, and stores y plainly, as Inductor's
kernels do, unless STORE_HINT (the norms) stores it through the evict_first one too; without
EVICT_HINT no access carries a cache hint; rmsnorm_bf16's WIDE turns
VEC4's 8-byte accesses into 16-byte ones; REG_ROW and CHUNK hold their packs in registers, not in
local memory; the norms' LEAN kernels fit torch.compile's register budget, hold a row of one step
in registers with REG_ROW as its persistent reductions do, and run where rows are whole packs. That the kernels compute the right values is for the GPU
(tests/gpu/test_template_combinations.py, bench/membound_probe.py)."""

from __future__ import annotations

import re

import pytest

from fsr import candidate, tasks
from tests.support.templates import ARCH, COMPILER

NORMS = ("rmsnorm", "rmsnorm_bf16", "layernorm")
HINTED = NORMS + ("gemv",)
LOAD = re.compile(r"\bld\.global(?P<mods>(?:\.[\w:]+)*?)(?:\.v(?P<vec>[24]))?\.[bfus]\d+\s")
STORE = re.compile(r"\bst\.global(?P<mods>(?:\.[\w:]+)*?)(?:\.v(?P<vec>[24]))?\.[bfus]\d+\s")


def compiled(name: str, values: dict[str, int]):
    task = tasks.load(name)
    cand = candidate.parse(task.template_source or "", task)
    return COMPILER.compile(candidate.with_defines(cand, values), ARCH)


def accesses(pattern: re.Pattern[str], ptx: str) -> list[tuple[str, str]]:
    """(modifiers, vector width or '') of each global access in the PTX."""
    return [(m.group("mods"), m.group("vec") or "") for m in pattern.finditer(ptx)]


@pytest.mark.parametrize("name", HINTED)
@pytest.mark.parametrize("vec4", [0, 1])
def test_evict_hint_loads_through_evict_last_and_evict_first_policies(name, vec4):
    on = compiled(name, {"EVICT_HINT": 1, "VEC4": vec4, "READONLY": 1}).ptx
    assert "createpolicy.fractional.L2::evict_last" in on and "createpolicy.fractional.L2::evict_first" in on
    loads = accesses(LOAD, on)
    assert any("L1::evict_last.L2::cache_hint" in m for m, _ in loads)  # x's first read (norms), x (gemv)
    assert any("L1::evict_first.L2::cache_hint" in m for m, _ in loads)  # x's last read, A (gemv)
    if name in NORMS:  # y is written once, never read back: plain, or evict_first with STORE_HINT
        assert accesses(STORE, on) and not any("cache_hint" in m for m, _ in accesses(STORE, on))
        hinted = compiled(name, {"EVICT_HINT": 1, "STORE_HINT": 1, "VEC4": vec4, "READONLY": 1}).ptx
        assert all("L1::evict_first.L2::cache_hint" in m for m, _ in accesses(STORE, hinted))
        assert set(accesses(LOAD, hinted)) == set(loads)  # the loads as without it
    off = compiled(name, {"EVICT_HINT": 0, "VEC4": vec4, "READONLY": 1} | ({"STORE_HINT": 1} if name in NORMS else {})).ptx
    assert "cache_hint" not in off and "createpolicy" not in off and accesses(LOAD, off)


def test_evict_hint_keeps_vec4_widths():
    for name, width in (("rmsnorm", "4"), ("rmsnorm_bf16", "2"), ("layernorm", "4"), ("gemv", "4")):
        loads = accesses(LOAD, compiled(name, {"EVICT_HINT": 1, "VEC4": 1, "UNROLL": 1}).ptx)
        assert any(v == width and "cache_hint" in m for m, v in loads), name


def test_wide_gives_bf16_rows_16_byte_accesses():
    narrow = compiled("rmsnorm_bf16", {"VEC4": 1}).ptx
    wide = compiled("rmsnorm_bf16", {"VEC4": 1, "WIDE": 1}).ptx
    assert {v for _, v in accesses(LOAD, narrow)} >= {"2"} and "4" not in {v for _, v in accesses(LOAD, narrow)}
    assert "4" in {v for _, v in accesses(LOAD, wide)} and "4" in {v for _, v in accesses(STORE, wide)}
    assert "2" not in {v for _, v in accesses(STORE, wide)}


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("block", [256, 1024])
def test_held_rows_and_chunks_stay_in_registers(name, block):
    if name == "layernorm" and block == 1024:
        block = 512  # layernorm's largest BLOCK
    for values in ({"REG_ROW": 1, "REG_VECS": 16}, {"CHUNK": 1, "UNROLL_BY": 8}):
        values |= {"VEC4": 1, "BLOCK": block} | ({"WIDE": 1} if name != "layernorm" else {})
        res = compiled(name, values)
        resources = dict(res.kernel_resources)[f"{name.removesuffix('_bf16')}_template"]  # not LEAN's kernel
        assert resources.spill_bytes == 0 and resources.stack_bytes == 0, (values, resources)
        assert resources.registers * block <= 65536, (values, resources)


@pytest.mark.parametrize(("name", "threads"), [("rmsnorm", 2048), ("rmsnorm_bf16", 2048), ("layernorm", 1536)])
def test_lean_kernel_fits_inductors_registers_where_the_general_loop_does_not(name, threads):
    """At torch.compile's shape (512 threads, 4 blocks an SM for the RMS norms, 32 registers; 3 for
    layer norm's Welford, 40) LEAN's kernel holds a row's packs without spilling; the general
    kernel's chunked loop at 512 threads needs 54-56 (2 blocks)."""
    shape = {"VEC4": 1, "BLOCK": 512, "EVICT_HINT": 1, "READONLY": 1, "WARP_SHUFFLE": 1, "UNROLL_BY": 4}
    shape |= {"ONLINE": 1, "FAST_MATH": 1} if name == "layernorm" else {}  # Welford with __fdividef
    op = name.removesuffix("_bf16")
    lean = dict(compiled(name, shape | {"LEAN": 1, "LEAN_THREADS": threads}).kernel_resources)[f"{op}_lean"]
    general = dict(compiled(name, shape | {"CHUNK": 1}).kernel_resources)[f"{op}_template"]
    assert lean.registers <= 65536 // threads and lean.spill_bytes == 0, lean
    assert general.registers > 40, general  # 2 blocks of 512 an SM at most


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize(("block", "threads"), [(512, 1536), (1024, 2048)])
def test_lean_kernel_holds_a_row_of_one_step_in_registers(name, block, threads):
    """REG_ROW in the LEAN kernel: at 8192 columns a row is one step of 512 threads with 4 float4s
    (2 of 8 bfloat16) a thread, or of 1024 with 2 (1), read once into registers, its loads beside
    the two passes' (rows of more steps). Its kernel fits the launch bounds without spilling (with
    bfloat16 at 1536 threads an SM at most 16 bytes: the two passes' loops beside the held row)."""
    shape = {"VEC4": 1, "LEAN": 1, "BLOCK": block, "LEAN_THREADS": threads, "UNROLL_BY": 4 if block == 512 else 2,
             "EVICT_HINT": 1, "READONLY": 1, "WARP_SHUFFLE": 1, "FAST_MATH": 1}
    shape |= {"WIDE": 1} if name == "rmsnorm_bf16" else {}
    op = name.removesuffix("_bf16")
    held = compiled(name, shape | {"REG_ROW": 1})
    lean = dict(held.kernel_resources)[f"{op}_lean"]
    assert lean.registers <= 65536 // threads, lean
    assert lean.spill_bytes == 0 or (name == "rmsnorm_bf16" and lean.spill_bytes <= 16), lean
    plain = compiled(name, shape)
    assert len(accesses(LOAD, held.ptx)) > len(accesses(LOAD, plain.ptx))  # the held path's own loads


@pytest.mark.parametrize(("name", "whole"), [("rmsnorm", 8), ("layernorm", 4)])
def test_lean_kernel_runs_where_rows_are_whole_packs_and_the_general_kernel_elsewhere(name, whole):
    task = tasks.load(name)
    cand = candidate.parse(task.template_source or "", task)
    lean_kernel, general = f"{name}_lean", f"{name}_template"

    def kernels(values, cols):
        return [launch.kernel for launch, _ in candidate.launches_at(candidate.with_defines(cand, values),
                                                                      {"rows": 3, "cols": cols})]

    lean = {"LEAN": 1, "VEC4": 1}
    assert kernels(lean, 8192) == [lean_kernel] and kernels(lean, 1000) == [lean_kernel]
    assert kernels(lean, 4099) == [general] and kernels(lean, 1000 + whole // 2) == [general]
    assert kernels(lean | {"VEC4": 0}, 8192) == [general]  # no packs without VEC4
    assert kernels(lean | {"WARP_ROW": 1}, 8192) == [general]  # a warp a row: the general kernel's
    assert kernels({"VEC4": 1}, 8192) == [general]

