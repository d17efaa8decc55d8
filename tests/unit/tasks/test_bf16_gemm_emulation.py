"""The bf16 GEMM templates (tasks/gemm_bf16, tasks/gemm_bf16_gelu) run on the CPU, their code as
written, through tests/data/bf16_emulation/emulate.h: the helpers that are inline PTX (cp.async,
ldmatrix, mma.sync) are replaced by emulations with the PTX ISA's semantics, everything else
(tiling, swizzles, loaders, the pipeline's waits and barriers, the epilogues) is compiled by g++
from the template. Each combination runs at the launch its header gives and is checked against
the task's float64 reference and tolerance (with its magnitude floor), with unwritten elements, writes outside C, shared
memory past the launch's bytes and reads outside the inputs failing too. Copies land early or
late and warps run in lockstep or one at a time, so a missing wait or barrier shows; mutated
templates (a barrier dropped, B's fragment halves swapped) must fail.

No GPU is needed; g++ and the ml_dtypes package are. What no emulation shows (timing, bank
conflicts, the hardware's own precision inside an MMA) is for `pytest -m gpu` on a device, and so
is the templates' WGMMA path (TMA, mbarriers, wgmma: the mma.sync kernel's switches are emulated;
the WGMMA path's tile mapping and store are, in test_gemm_wgmma_tiles.py and test_gemm_wgmma_store.py).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from fsr import candidate, tasks
from fsr.types import Candidate, Task
from tests.support.paths import DATA
from tests.support.precision import problem
from tests.support.wgmma_host import definition_span

ml_dtypes = pytest.importorskip("ml_dtypes")
if shutil.which("g++") is None:
    pytest.skip("g++ is needed to build the emulation", allow_module_level=True)


HEADER = DATA / "bf16_emulation" / "emulate.h"
BF16 = np.dtype(ml_dtypes.bfloat16)
TASKS = ("gemm_bf16", "gemm_bf16_gelu")
PTX_HELPERS = ("copy16", "copy_commit", "copy_wait", "ldmatrix_x4", "ldmatrix_x4_trans", "mma_bf16")
EMULATED = """
inline void copy16(unsigned dst, const void* src, bool ok) { emu_copy16(dst, src, ok); }
inline void copy_commit() { emu_commit(); }
template <int N> inline void copy_wait() { emu_wait(N); }
inline void ldmatrix_x4(unsigned* r, unsigned addr) { emu_ldmatrix(r, addr, false); }
inline void ldmatrix_x4_trans(unsigned* lo, unsigned* hi, unsigned addr) {
    unsigned r[4];
    emu_ldmatrix(r, addr, true);
    lo[0] = r[0]; lo[1] = r[1]; hi[0] = r[2]; hi[1] = r[3];
}
inline void mma_bf16(float* c, const unsigned* a, const unsigned* b) { emu_mma(c, a, b); }
"""
# Where the templates' WGMMA path starts (to the end of the file): TMA, mbarriers and wgmma are
# asynchronous and warp-specialised, tested on the GPU (tests/gpu/test_wgmma.py), not emulated.
WGMMA_SECTION = "// ---- Hopper: wgmma"
# ragged on every dimension, tiny, multiples of 8 in partial tiles, whole tiles of most blocks, and
# a deep K in 16-byte rows (the cp.async pipeline goes round its stages many times)
SIZES = ({"M": 1, "N": 1, "K": 1}, {"M": 33, "N": 65, "K": 17}, {"M": 77, "N": 136, "K": 72},
         {"M": 200, "N": 264, "K": 136}, {"M": 256, "N": 512, "K": 192}, {"M": 40, "N": 72, "K": 1000})
# (LATE, ORDER): copies at issue with warps in lockstep, at the wait with warps one at a time
MODES = ((0, 0), (1, 1), (0, 2))


def load(name: str) -> tuple[Task, Candidate]:
    try:
        task = tasks.load(name)
    except tasks.TaskError as e:
        pytest.skip(f"{name} does not load here: {e}")
    assert task.template_source
    return task, candidate.parse(task.template_source, task)


def strip_function(src: str, name: str) -> str:
    """`src` without the definition of device function `name` (and its template line)."""
    start, end = definition_span(src, r"(template\s*<[^>]*>\s*)?__device__ __forceinline__ void " + name + r"\(")
    return src[:start] + src[end:]


def host_source(task: Task, cand: Candidate) -> str:
    """The template as a host program: defines, the emulation, the code with its PTX helpers
    swapped for emulated ones, and a main that launches the kernel's blocks one by one."""
    src = candidate.HEADER_RE.sub("", cand.source).replace("#include <cuda_bf16.h>", "")
    src = src.split(WGMMA_SECTION)[0]  # the mma.sync kernel and what it calls, all before Hopper's path
    src = re.sub(r"extern __shared__[^;]*smem_raw\[\];", "", src)  # emulate.h's array
    for helper in PTX_HELPERS:
        src = strip_function(src, helper)
    anchor = "__device__ __forceinline__ unsigned smem_u32"
    src = src.replace(anchor, EMULATED + anchor)
    has_bias = any(a.name == "bias" for a in task.args)
    call = f"{cand.launches[0].kernel}(gA, gB, {'gBias, ' if has_bias else ''}gC, gM, gN, gK)"
    defines = "".join(f"#define {k} {v}\n" for k, v in cand.resolved_defines())
    return (f'{defines}#include "{HEADER}"\n{src}\nvoid entry() {{ {call}; }}\n'
            f"int main(int argc, char** argv) {{ return emulate_main(argc, argv, entry, {str(has_bias).lower()}); }}\n")


def build(task: Task, cand: Candidate, folder: Path, runtime: Path) -> Path:
    """The emulated program, linked with `runtime` (emulate.h's scheduler, tests/unit/tasks/conftest.py)."""
    exe = folder / "emulated"
    (folder / "emulated.cpp").write_text(host_source(task, cand))
    subprocess.run(["g++", "-O1", "-std=c++17", "-w", "-o", str(exe), str(folder / "emulated.cpp"), str(runtime)],
                   check=True)
    return exe


def error_ratio(task: Task, cand: Candidate, exe: Path, size: dict[str, int], late: int, order: int,
                folder: Path) -> float:
    """Worst |C - ref| / (atol + rtol |ref|) of one emulated launch; raises AssertionError where
    the run stops (an access out of bounds, a deadlock) or leaves elements unwritten."""
    inputs, ref = problem(task, size, "C")
    (grid, block, smem), = candidate.launch_dims(cand, size)
    for name in ("A", "B", "bias"):
        inputs.get(name, np.zeros(0, BF16)).view(np.uint16).tofile(folder / name)
    argv = [size["M"], size["N"], size["K"], grid[0], grid[1], block[0], smem, late, folder, order]
    run = subprocess.run([str(exe)] + [str(a) for a in argv], capture_output=True, text=True)
    assert run.returncode == 0, f"{size}: {run.stderr.strip()[:300]}"
    out = np.fromfile(folder / "C", np.uint16).view(BF16).reshape(size["M"], size["N"]).astype(np.float64)
    assert not np.isnan(out).any(), f"{size}: {int(np.isnan(out).sum())} elements of C unwritten"
    return float(np.max(np.abs(out - ref) / bounds(task, ref)))


def bounds(task: Task, ref: np.ndarray) -> np.ndarray:
    """Each element's allowed error: atol + rtol * max(|ref|, floor * mean |ref|), the floor
    where fsr's tasks have one (a bfloat16 output's default is 1)."""
    floor = getattr(task, "floor", 0.0)
    return task.atol + task.rtol * np.maximum(np.abs(ref), floor * float(np.abs(ref).mean()))


def worst_error(task: Task, cand: Candidate, folder: Path, runtime: Path) -> float:
    """The worst error ratio over every size and mode, or the first one past 1 (enough to fail)."""
    exe = build(task, cand, folder, runtime)
    worst = 0.0
    for size in SIZES:
        for late, order in MODES:
            ratio = error_ratio(task, cand, exe, size, late, order, folder)
            if not ratio <= 1.0:
                return ratio
            worst = max(worst, ratio)
    return worst


def combinations(cand: Candidate) -> list[dict[str, int]]:
    """All switches off and on, each alone, and the smallest and largest tiles (one warp of
    32 x 32; eight of 64 x 64 with the deepest k tile) at every switch on."""
    names = [f.name for f in cand.features if f.name != "WGMMA"]  # the mma.sync kernel's switches
    on = {n: 1 for n in names}
    small = {"WM": 32, "WN": 32, "WARPS_M": 1, "WARPS_N": 1, "BK": 16, "STAGES": 2}
    large = {"WM": 64, "WN": 64, "WARPS_M": 4, "WARPS_N": 2, "BK": 64, "STAGES": 6}
    return [{}, on] + [{n: 1} for n in names] + [on | small, on | large]


@pytest.mark.parametrize("name", TASKS)
def test_every_switch_and_the_extreme_tiles_compute_the_reference(name, tmp_path, emulation_runtime):
    task, cand = load(name)
    combos = combinations(cand)
    folders = [tmp_path / str(i) for i in range(len(combos))]
    for f in folders:
        f.mkdir()
    with ThreadPoolExecutor(max_workers=2) as pool:
        worst = list(pool.map(lambda v, f: worst_error(task, candidate.with_defines(cand, v), f, emulation_runtime), combos, folders))
    bad = [(v, w) for v, w in zip(combos, worst, strict=True) if not w <= 1.0]
    assert not bad, bad
    assert max(worst) > 0.1  # C is rounded to bfloat16: an exact result would mean the check saw nothing


@pytest.mark.parametrize("old, new, why", [
    ("        copy_wait<NSTAGES - 2>();\n        __syncthreads();", "        copy_wait<NSTAGES - 2>();",
     "a stage is refilled and read without the barrier"),
    ("copy_wait<NSTAGES - 2>();", "copy_wait<NSTAGES - 1>();", "tile t is read before its copies are waited for"),
    ("ldmatrix_x4_trans(f.b[2 * nj], f.b[2 * nj + 1],", "ldmatrix_x4_trans(f.b[2 * nj + 1], f.b[2 * nj],",
     "B's n8 tiles swapped"),
    ("const bool ok = FULL || (r0 + rj < rows && col < cols);", "const bool ok = FULL || (r0 + rj < rows);",
     "chunks past K or N copied from outside the inputs"),
])
def test_a_broken_template_fails_the_emulation(old, new, why, tmp_path, emulation_runtime):
    task, cand = load("gemm_bf16")
    assert old in cand.source
    broken = dataclasses.replace(cand, source=cand.source.replace(old, new, 1))
    with pytest.raises(AssertionError):
        assert worst_error(task, broken, tmp_path, emulation_runtime) <= 1.0, why
