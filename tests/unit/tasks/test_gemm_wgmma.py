"""The bf16 GEMM templates' WGMMA path on the host, no GPU: at every combination of its tunables
the header runs the wgmma launch exactly where K and N are multiples of 8 (its tensor maps legal
there) and the mma.sync launch elsewhere, with WGMMA off only the mma.sync launch; its grid is one
block a tile of C, its block a producer and its consumer warp groups, its shared memory a whole
number of TMA stages (two or more) within 227 KiB beside the 2 KiB of alignment and barriers. The
compiled wgmma kernel (NVRTC, sm_90a) is what the switch promises: wgmma of the tile's width, TMA
copies, register hand-over, no local memory. That the tiles arrive and multiply right is for the
GPU (tests/gpu/test_wgmma.py)."""

from __future__ import annotations

import itertools
import math

import pytest

from fsr import candidate, tasks
from fsr.evaluate import diagnose
from fsr.evaluate.compile import BASE_OPTIONS, CompileFailed, full_source, nvrtc
from tests.support.templates import COMPILER

NAMES = ("gemm_bf16", "gemm_bf16_gelu")
WG = ("WG_BN", "WG_MT", "WG_CONSUMERS", "WG_STAGES", "WG_GROUP")
SMEM_OPTIN = 227 * 1024
RESERVED = 2048  # the stages' 1024-byte alignment and the barriers after them


def template(name: str) -> tuple[tasks.Task, candidate.Candidate]:
    task = tasks.load(name)
    return task, candidate.parse(task.template_source, task)


def tile(values: dict[str, int]) -> tuple[int, int]:
    """(rows, columns) of C a block computes: m64 tiles a consumer capped by its accumulators."""
    mt = min(values["WG_MT"], 256 // values["WG_BN"])
    return 64 * mt * values["WG_CONSUMERS"], values["WG_BN"]


def wg_combinations(cand: candidate.Candidate) -> list[dict[str, int]]:
    tunables = {t.name: t.values for t in cand.tunables if t.name in WG}
    assert set(tunables) == set(WG)
    return [dict(zip(WG, v, strict=True)) for v in itertools.product(*(tunables[n] for n in WG))]


@pytest.mark.parametrize("name", NAMES)
def test_the_wgmma_launch_runs_where_tensor_maps_can_be_made_and_fits(name):
    task, cand = template(name)
    sizes = [dict(s) for s in task.test_sizes + (task.bench_size,)]
    assert any(s["K"] % 8 or s["N"] % 8 for s in sizes) and any(not (s["K"] % 8 or s["N"] % 8) for s in sizes)
    for values in wg_combinations(cand):
        one = candidate.with_defines(cand, values | {"WGMMA": 1})
        candidate.check(one, task)  # every size: a launch runs, its maps are legal
        bm, bn = tile(values)
        for size in sizes:
            (launch, (grid, block, smem)), = candidate.launches_at(one, size)
            if size["K"] % 8 or size["N"] % 8:
                assert launch.kernel.endswith("_template"), (values, size)
                continue
            assert launch.kernel.endswith("_wgmma"), (values, size)
            assert grid == (math.ceil(size["N"] / bn) * math.ceil(size["M"] / bm),), (values, size)
            assert block == (128 * (values["WG_CONSUMERS"] + 1),)
            stage = 128 * (bm + bn)  # bytes: 64-deep k tiles of A (bm rows) and B (bn columns)
            stages, rest = divmod(smem - RESERVED, stage)
            assert rest == 0 and 2 <= stages <= values["WG_STAGES"] and smem <= SMEM_OPTIN, (values, smem)
            assert stages == values["WG_STAGES"] or smem + stage > SMEM_OPTIN  # capped only where needed
            maps = candidate.resolve_maps(one, task, size, [launch])
            assert maps["a_tiles"].box == (64, bm) and maps["b_tiles"].box == (64, 64)
            assert {m.swizzle for m in maps.values()} == {"128B"}


@pytest.mark.parametrize("name", NAMES)
def test_with_wgmma_off_only_the_mma_sync_launch_runs(name):
    task, cand = template(name)
    for size in task.test_sizes + (task.bench_size,):
        (launch, _), = candidate.launches_at(cand, dict(size))
        assert launch.kernel.endswith("_template")


def opcodes(name: str, values: dict[str, int]) -> list[str]:
    task, cand = template(name)
    compiled = COMPILER.compile(candidate.with_defines(cand, values | {"WGMMA": 1}), "sm_90")
    (registers,) = [r.registers for k, r in compiled.kernel_resources if k.endswith("_wgmma")]
    if values.get("WG_CONSUMERS", 2) == 2:
        # setmaxnreg only moves registers within the block's pool, taken at launch: 384 threads at
        # the cap (65536 / 384, to 8) hold 64512, what 40 for the producer and 232 for each
        # consumer need; fewer, and the consumers' increase would wait for ever
        assert registers == 168
    functions = diagnose.disassemble(compiled.cubin)
    if functions is None:
        pytest.skip("nvdisasm is not installed")
    (kernel,) = [k for k in functions if k.endswith("_wgmma")]
    return functions[kernel]


@pytest.mark.parametrize("name,values,count", [
    ("gemm_bf16", {}, 4), ("gemm_bf16_gelu", {}, 4), ("gemm_bf16", {"WG_BN": 128, "WG_MT": 2}, 8),
])
def test_the_wgmma_kernel_compiles_to_wgmma_fed_by_tma(name, values, count):
    ops = opcodes(name, values)  # opcodes as fsr.evaluate.diagnose reads them: HGMMA.64 (x256x16 ... cut)
    assert ops.count("HGMMA.64") == count  # four k16 steps of a 64-deep tile, per m64 tile of a consumer
    assert sum(o.startswith("UTMALDG.2D") for o in ops) >= 2  # A's box and B's
    assert any(o.startswith("USETMAXREG.DEALLOC") for o in ops) and any(o.startswith("USETMAXREG.TRY") for o in ops)
    assert not [o for o in ops if o.startswith(("LDL", "STL", "HMMA"))]


@pytest.mark.parametrize("name", ["gemm_bf16", "attention_bf16"])  # every template with a WGMMA switch
def test_the_plain_arch_compile_of_wgmma_stops_in_the_preprocessor_and_says_why(name):
    """fsr's compile service turns to sm_90a where the plain arch's log says an instruction is not
    supported on its target (fsr.evaluate.compile._VARIANT_ONLY): the template says so before the
    front end compiles anything, so a WGMMA combination costs one compile, not one and a half."""
    from fsr.evaluate.compile import _VARIANT_ONLY

    task, cand = template(name)
    one = candidate.with_defines(cand, {"WGMMA": 1})
    kernels = tuple(launch.kernel for launch in one.launches)
    with pytest.raises(CompileFailed) as failed:
        nvrtc(full_source(one), kernels, ("--gpu-architecture=sm_90",) + BASE_OPTIONS)
    assert "#error" in str(failed.value) and _VARIANT_ONLY.search(str(failed.value))
    nvrtc(full_source(one), kernels, ("--gpu-architecture=sm_90a",) + BASE_OPTIONS)  # compiles
