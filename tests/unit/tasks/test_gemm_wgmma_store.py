"""The bf16 GEMM templates' WGMMA store on the CPU: wg_store (gemm_bf16's register stores, and
gemm_bf16_gelu's tile staged in shared memory, then bias and GELU in float32 and 8-column chunks)
and wg_tile, compiled by g++ from the template's text and run by tests/data/bf16_emulation's
scheduler (each thread a coroutine, the named barrier a block barrier, warps in lockstep or one at
a time), take float32 accumulators laid out as the PTX ISA gives wgmma's m64nNk16 results
(register i of lane l in warp w of the group: row 16 w + l / 4 + 8 (i % 4 / 2), column 8 (i / 4)
+ 2 (l % 4) + i % 2) and must store bfloat16(gelu(acc + bias)) (or bfloat16(acc)) to every
element of C, within one bfloat16 unit of a float64 NumPy reference, nothing outside C, at
every tile shape, with VEC4 and FAST_MATH off and on and C 16-, 4- and 2-byte aligned. Mutated
stores and formulas must fail. The wgmma, TMA and mbarrier code that fills the accumulators is
for the GPU (tests/gpu/test_wgmma.py)."""

from __future__ import annotations

import dataclasses
import itertools
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from fsr import candidate, tasks
from fsr.types import Candidate, Task
from tests.support import wgmma_host
from tests.support.paths import DATA

ml_dtypes = pytest.importorskip("ml_dtypes")
if shutil.which("g++") is None:
    pytest.skip("g++ is needed to build the emulation", allow_module_level=True)

BF16 = np.dtype(ml_dtypes.bfloat16)
HEADER = DATA / "bf16_emulation" / "emulate.h"
SHAPE = ("WG_BN", "WG_MT", "WG_CONSUMERS")
BARRIER = re.compile(r'asm volatile\("bar\.sync 1, %0;" ::"n"\(WG_CONSUMERS \* 128\) : "memory"\);')
# (M, N, C's offset in elements from a 256-byte boundary: 16-, 2- and 4-byte aligned, ORDER)
SIZES = ((5, 8, 0, 0), (77, 136, 1, 1), (200, 264, 2, 2), (130, 520, 0, 1))
MAIN = r"""
static std::vector<float> D;
// One consumer thread: its accumulators as wgmma leaves them (the PTX ISA's layout), NaN past C.
void entry() {
    int m0, n0;
    wg_tile(gM, gN, m0, n0);
    const int c = threadIdx.x / 128, lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
    float acc[WG_MTE][WG_BN / 2];
    for (int m = 0; m < WG_MTE; ++m)
        for (int i = 0; i < WG_BN / 2; ++i) {
            const int row = m0 + 64 * (c * WG_MTE + m) + 16 * warp + lane / 4 + 8 * (i % 4 / 2);
            const int col = n0 + 8 * (i / 4) + 2 * (lane % 4) + i % 2;
            acc[m][i] = row < gM && col < gN ? D[(size_t)row * gN + col] : NAN;
        }
    wg_store(acc, gC, gBias, gM, gN, m0, n0, c, reinterpret_cast<float*>(smem_raw));
}
// argv: M N blocks smem_bytes C's offset ORDER folder; reads folder/D (float32) and folder/bias
// (bfloat16), writes folder/C.
int main(int argc, char** argv) {
    if (argc != 8) return 5;
    gM = atoi(argv[1]); gN = atoi(argv[2]);
    const unsigned blocks = atoi(argv[3]), shift = atoi(argv[5]), nt = 128 * WG_CONSUMERS;
    smem_bytes = atoi(argv[4]); ORDER = atoi(argv[6]);
    const std::string dir = argv[7];
    if (smem_bytes > SMEM_CAP) return 6;
    D.resize((size_t)gM * gN);
    FILE* f = fopen((dir + "/D").c_str(), "rb");
    if (fread(D.data(), 4, D.size(), f) != D.size()) return 4;
    fclose(f);
    gBias = aligned_copy(read_file((dir + "/bias").c_str(), gN));
    const size_t nc = (size_t)gM * gN, guard = 64 + shift;
    std::vector<uint16_t> cbuf(nc + 2 * guard, 0x7fc0);  // NaN: an unwritten element fails
    for (size_t i = 0; i < guard; ++i) cbuf[i] = cbuf[nc + guard + i] = 0x1234;
    __nv_bfloat16* cmem = aligned_copy(cbuf);
    gC = cmem + guard;
    gridDim.x = blocks; blockDim.x = nt;
    kernel_entry = entry;
    for (unsigned b = 0; b < blocks; ++b) {
        memset(smem_raw, 0xff, smem_bytes);
        memset(smem_raw + smem_bytes, 0xa5, SMEM_CAP - smem_bytes);
        run_block(b, 0, nt);
        for (size_t i = smem_bytes; i < SMEM_CAP; ++i)
            if (smem_raw[i] != 0xa5) { fprintf(stderr, "shared byte %zu past the launch's written\n", i); return 3; }
    }
    memcpy(cbuf.data(), cmem, cbuf.size() * 2);
    for (size_t i = 0; i < guard; ++i)
        if (cbuf[i] != 0x1234 || cbuf[nc + guard + i] != 0x1234) { fprintf(stderr, "write outside C\n"); return 3; }
    f = fopen((dir + "/C").c_str(), "wb");
    fwrite(cbuf.data() + guard, 2, nc, f);
    fclose(f);
    return 0;
}
"""


def template(name: str) -> tuple[Task, Candidate]:
    task = tasks.load(name)
    return task, candidate.parse(task.template_source, task)


def host_source(cand: Candidate, values: dict[str, int]) -> str:
    """The template's macros, GELU and bias helpers, wg_tile and wg_store on emulate.h."""
    stores = wgmma_host.between(cand, "#if WGMMA && GELU", "#if WGMMA\n#if WG_CONSUMERS")
    stores, barriers = BARRIER.subn("__syncthreads();", stores)
    assert barriers == 2, "wg_store's two named barriers"
    return (wgmma_host.defines(cand, values) + f'#include "{HEADER}"\n' + wgmma_host.macros(cand)
            + wgmma_host.between(cand, "// ---- C ----", "#if VEC4") + wgmma_host.function(cand, "wg_tile")
            + stores + MAIN)


def reference(acc: np.ndarray, bias: np.ndarray, gelu: bool) -> np.ndarray:
    """What C should hold, in float64: gelu(acc + bias) (the sum in float32, as the kernel), or acc."""
    if not gelu:
        return acc.astype(np.float64)
    x = (acc + bias.astype(np.float32)).astype(np.float64)
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def worst_error(task: Task, cand: Candidate, values: dict[str, int], folder: Path, runtime: Path) -> float:
    """The worst |C - ref| / (2^-7 |ref| + 1e-6) over SIZES: one bfloat16 unit (a rounding of the
    float32 result is half of one, tanhf's and __expf's errors may round the other way);
    raises AssertionError where a run stops or leaves elements of C unwritten."""
    exe = wgmma_host.compile_program(host_source(cand, values), folder, runtime)
    one, gelu, worst = candidate.with_defines(cand, values | {"WGMMA": 1}), task.name.endswith("gelu"), 0.0
    rng = np.random.default_rng(0)
    for M, N, shift, order in SIZES:
        (launch, (grid, _, smem)), = candidate.launches_at(one, {"M": M, "N": N, "K": 64})
        assert launch.kernel.endswith("_wgmma")
        acc = (rng.standard_normal((M, N)) * 2).astype(np.float32)
        bias = rng.standard_normal(N).astype(BF16)
        acc.tofile(folder / "D")
        bias.view(np.uint16).tofile(folder / "bias")
        run = subprocess.run([str(exe), str(M), str(N), str(grid[0]), str(smem), str(shift), str(order), str(folder)],
                             capture_output=True, text=True)
        assert run.returncode == 0, f"{M} x {N}: {run.returncode} {run.stderr.strip()[:300]}"
        out = np.fromfile(folder / "C", np.uint16).view(BF16).reshape(M, N).astype(np.float64)
        assert not np.isnan(out).any(), f"{M} x {N}: {int(np.isnan(out).sum())} elements of C unwritten"
        ref = reference(acc, bias, gelu)
        worst = max(worst, float(np.max(np.abs(out - ref) / (2.0**-7 * np.abs(ref) + 1e-6))))
    return worst


def combinations(task: Task, cand: Candidate) -> list[dict[str, int]]:
    """Every tile shape, with the store's switches (VEC4 and FAST_MATH, GELU's alone) all off and all on."""
    tunables = {t.name: t.values for t in cand.tunables if t.name in SHAPE}
    switches = [f.name for f in cand.features if f.name in ("VEC4", "FAST_MATH") and task.name.endswith("gelu")]
    shapes = [dict(zip(SHAPE, v, strict=True)) for v in itertools.product(*(tunables[n] for n in SHAPE))]
    return [s | {n: on for n in switches} for s in shapes for on in ((0, 1) if switches else (0,))]


@pytest.mark.parametrize("name", ("gemm_bf16", "gemm_bf16_gelu"))
def test_the_store_writes_each_element_of_c_once_rounded_from_the_reference(name, tmp_path, emulation_runtime):
    task, cand = template(name)
    combos = combinations(task, cand)
    folders = [tmp_path / str(i) for i in range(len(combos))]
    for f in folders:
        f.mkdir()
    with ThreadPoolExecutor(max_workers=2) as pool:
        worst = list(pool.map(lambda v, f: worst_error(task, cand, v, f, emulation_runtime), combos, folders))
    bad = [(v, w) for v, w in zip(combos, worst, strict=True) if not w <= 1.0]
    assert not bad, bad
    assert max(worst) > 0.1  # C is rounded to bfloat16: an exact result would mean the check saw nothing


BROKEN = [
    ("gemm_bf16_gelu", "out[e] = epilogue(src[e], bias_at(bias, n + e, N));", "out[e] = epilogue(src[e], bias_at(bias, n, N));",
     "every column of a chunk takes the chunk's first bias"),
    ("gemm_bf16_gelu", "srow[8 * j + 1] = acc[m][4 * j + 2 * h + 1];", "srow[8 * j + 1] = acc[m][4 * j + 2 * h];",
     "a register pair's second column staged from its first"),
    ("gemm_bf16_gelu", "16 * warp + lane / 4 + 8 * h) * WG_LDS", "16 * warp + lane / 4 + 4 * h) * WG_LDS",
     "the fragment's lower 8 rows staged 4 rows down"),
    ("gemm_bf16_gelu", "const int r = 64 * c * WG_MTE + i / CHUNKS,", "const int r = i / CHUNKS,",
     "every consumer stores the first consumer's rows"),
    ("gemm_bf16_gelu", "return 0.5f * x * (1.0f + tanhf(u));", "return 0.5f * x * (1.0f + tanhf(x));",
     "GELU's tanh taken of x, not of u"),
    ("gemm_bf16_gelu", "if (row >= M || n >= N) continue;", "if (row >= M) continue;", "chunks past N stored"),
    ("gemm_bf16", "const int col = n0 + 8 * j + 2 * (lane % 4);", "const int col = n0 + 8 * j + (lane % 4);",
     "register pairs stored at the wrong columns"),
]


@pytest.mark.parametrize("name, old, new, why", BROKEN)
def test_a_broken_store_fails(name, old, new, why, tmp_path, emulation_runtime):
    task, cand = template(name)
    assert cand.source.count(old) == 1
    broken = dataclasses.replace(cand, source=cand.source.replace(old, new))
    values = {"WG_BN": 128, "WG_MT": 2, "WG_CONSUMERS": 2}
    with pytest.raises(AssertionError):
        assert worst_error(task, broken, values, tmp_path, emulation_runtime) <= 1.0, why
