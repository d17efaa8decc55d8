"""The bf16 attention template (tasks/attention_bf16's, which attention_bf16_causal names with
CAUSAL 1) and the baselines of both tasks run on the CPU, their code as written, through
tests/data/bf16_emulation/emulate.h: the helpers that are inline PTX (cp.async, ldmatrix,
mma.sync, ex2.approx) are replaced by emulations with the PTX ISA's semantics, everything else
(tiles, swizzles, loaders, the pipeline's waits and barriers, the online softmax and its quad
shuffles, P's fragments, the stores) is compiled by g++ from the source. Each combination runs at
the launch its header gives and is checked against the task's float64 reference and tolerance,
with unwritten elements of o, writes outside o, shared memory past the launch's bytes and reads
outside the inputs failing too; q, k, v and o are also given misaligned by one element (the
gathered path, element stores). Copies land early or late and warps run in lockstep or one at a
time, so a missing wait or barrier shows; mutated templates must fail, the causal task's with its
define turned off among them.

No GPU is needed; g++ and the ml_dtypes package are. What no emulation shows (timing, bank
conflicts, the hardware's own precision inside an MMA) is for `pytest -m gpu` on a device.
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

from fsr import candidate, dtypes, tasks
from fsr.types import Candidate, Task
from tests.support.paths import DATA
from tests.support.precision import problem

ml_dtypes = pytest.importorskip("ml_dtypes")
if shutil.which("g++") is None:
    pytest.skip("g++ is needed to build the emulation", allow_module_level=True)


HEADER = DATA / "bf16_emulation" / "emulate.h"
BF16 = np.dtype(ml_dtypes.bfloat16)
TASKS = ("attention_bf16", "attention_bf16_causal")
PTX_HELPERS = ("copy16", "copy_commit", "copy_wait", "ldmatrix_x4", "ldmatrix_x4_trans", "mma_bf16", "ex2_approx")
EMULATED = """
inline void copy16(unsigned dst, const void* src, bool ok) { emu_copy16(dst, src, ok); }
inline void copy_commit() { emu_commit(); }
template <int N> inline void copy_wait() { emu_wait(N); }
inline void ldmatrix_x4(unsigned* r, unsigned addr) { emu_ldmatrix(r, addr, false); }
inline void ldmatrix_x4_trans(unsigned* r, unsigned addr) { emu_ldmatrix(r, addr, true); }
inline void mma_bf16(float* c, const unsigned* a, const unsigned* b) { emu_mma(c, a, b); }
inline float ex2_approx(float x) { return exp2f(x); }
"""
MAIN = """
const __nv_bfloat16 *gq, *gk, *gv;
__nv_bfloat16* go;
int gbh, gseq;
void entry() { KERNEL(gq, gk, gv, go, gbh, gseq); }
// A copy of v, `shift` elements past a 256-byte boundary (NaN before it), registered as an input.
static __nv_bfloat16* placed(std::vector<uint16_t> v, int shift) {
    v.insert(v.begin(), shift, 0x7fc0);
    return aligned_copy(v) + shift;
}
// argv: bh seq grid.x grid.y threads smem LATE folder ORDER shift; reads folder/q, k, v, writes folder/o.
int main(int argc, char** argv) {
    if (argc != 11) return 5;
    gbh = atoi(argv[1]); gseq = atoi(argv[2]);
    const unsigned gx = atoi(argv[3]), gy = atoi(argv[4]), nt = atoi(argv[5]);
    smem_bytes = atoi(argv[6]);
    LATE = atoi(argv[7]);
    const std::string dir = argv[8];
    ORDER = atoi(argv[9]);
    const int shift = atoi(argv[10]);
    if (smem_bytes > SMEM_CAP) return 3;
    const size_t n = (size_t)gbh * gseq * 128, guard = 64;
    gq = placed(read_file((dir + "/q").c_str(), n), shift);
    gk = placed(read_file((dir + "/k").c_str(), n), shift);
    gv = placed(read_file((dir + "/v").c_str(), n), shift);
    std::vector<uint16_t> obuf(n + 2 * guard, 0x7fc0);  // NaN: an unwritten element fails
    for (size_t i = 0; i < guard; ++i) obuf[i] = obuf[n + guard + i] = 0x1234;
    __nv_bfloat16* omem = placed(obuf, shift);
    inputs.pop_back();  // o is not an input: cp.async must not read it
    go = omem + guard;
    gridDim.x = gx; gridDim.y = gy; blockDim.x = nt;
    kernel_entry = entry;
    for (unsigned by = 0; by < gy; ++by)
        for (unsigned bx = 0; bx < gx; ++bx) {
            memset(smem_raw, 0xff, smem_bytes);
            memset(smem_raw + smem_bytes, 0xa5, SMEM_CAP - smem_bytes);
            run_block(bx, by, nt);
            for (size_t i = smem_bytes; i < SMEM_CAP; ++i)
                if (smem_raw[i] != 0xa5) { fprintf(stderr, "shared byte %zu past the launch's written\\n", i); return 3; }
        }
    memcpy(obuf.data(), omem, obuf.size() * 2);
    for (size_t i = 0; i < guard; ++i)
        if (obuf[i] != 0x1234 || obuf[n + guard + i] != 0x1234) { fprintf(stderr, "write outside o\\n"); return 3; }
    FILE* f = fopen((dir + "/o").c_str(), "wb");
    fwrite(obuf.data() + guard, 2, n, f);
    fclose(f);
    return 0;
}
"""
# Where the template's WGMMA path starts (to the end of the file): TMA, mbarriers and wgmma are
# asynchronous and warp-specialised, tested on the GPU (tests/gpu/test_wgmma_attention.py), not here.
WGMMA_SECTION = "// ---- Hopper: TMA and wgmma"
# one key, a ragged tile, ragged tiles over two query blocks of 64 (one of 128), whole tiles of
# every size over two heads
SIZES = ({"bh": 1, "seq": 1}, {"bh": 1, "seq": 7}, {"bh": 1, "seq": 129}, {"bh": 2, "seq": 256})
# (LATE, ORDER, misaligned by): copies at issue with warps in lockstep, at the wait with warps one
# at a time (first to last, last to first), and misaligned buffers
MODES = ((0, 0, 0), (1, 1, 0), (0, 2, 0), (1, 0, 1))


def load(name: str) -> tuple[Task, Candidate]:
    try:
        task = tasks.load(name)
    except tasks.TaskError as e:
        pytest.fail(f"{name} does not load: {e}")
    assert task.template_source
    return task, candidate.parse(task.template_source, task)


def strip_function(src: str, name: str) -> str:
    """`src` without the definition of device function `name` (and its template line)."""
    m = re.search(r"(template\s*<[^>]*>\s*)?__device__ __forceinline__ \w+ " + name + r"\(", src)
    if m is None:
        return src  # behind a switch that is off
    depth = 0
    for j in range(src.index("{", m.end()), len(src)):
        depth += {"{": 1, "}": -1}.get(src[j], 0)
        if depth == 0:
            return src[:m.start()] + src[j + 1:]
    raise AssertionError(f"{name}: unbalanced braces")


def host_source(cand: Candidate) -> str:
    """The template as a host program: defines, the emulation, the code with its PTX helpers
    swapped for emulated ones, and a main that launches the kernel's blocks one by one."""
    defines = dict(cand.resolved_defines())
    src = candidate.HEADER_RE.sub("", cand.source).replace("#include <cuda_bf16.h>", "")
    src = src.split(WGMMA_SECTION)[0]  # the mma.sync kernel and what it calls, all before Hopper's path
    src = re.sub(r"extern __shared__[^;]*smem_raw\[\];", "", src)  # emulate.h's array
    # the switches' #if blocks are resolved by the preprocessor; strip every helper's definition
    for helper in PTX_HELPERS:
        src = strip_function(src, helper)
    anchor = "__device__ __forceinline__ unsigned smem_u32"  # absent from a baseline, which has no PTX
    src = src.replace(anchor, EMULATED + anchor)
    head = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    return f'{head}#include "{HEADER}"\n{src}\n' + MAIN.replace("KERNEL", cand.launches[0].kernel)


def build(cand: Candidate, folder: Path, runtime: Path) -> Path:
    """The emulated program, linked with `runtime` (emulate.h's scheduler, tests/unit/tasks/conftest.py)."""
    exe = folder / "emulated"
    (folder / "emulated.cpp").write_text(host_source(cand))
    subprocess.run(["g++", "-O1", "-std=c++17", "-w", "-o", str(exe), str(folder / "emulated.cpp"), str(runtime)],
                   check=True)
    return exe


def error_ratio(task: Task, cand: Candidate, exe: Path, size: dict[str, int], mode: tuple[int, int, int],
                folder: Path) -> float:
    """Worst |o - ref| / bound of one emulated launch; raises AssertionError where the run stops
    (an access out of bounds, a deadlock) or leaves elements unwritten."""
    inputs, ref = problem(task, size, "o")
    (grid, block, smem), = candidate.launch_dims(cand, size)
    for name in ("q", "k", "v"):
        inputs[name].view(np.uint16).tofile(folder / name)
    late, order, shift = mode
    argv = [size["bh"], size["seq"], grid[0], grid[1], block[0], smem, late, folder, order, shift]
    run = subprocess.run([str(exe)] + [str(a) for a in argv], capture_output=True, text=True)
    assert run.returncode == 0, f"{size} {mode}: {run.stderr.strip()[:300]}"
    out = np.fromfile(folder / "o", np.uint16).view(BF16).reshape(ref.shape).astype(np.float64)
    assert not np.isnan(out).any(), f"{size} {mode}: {int(np.isnan(out).sum())} elements of o unwritten"
    return float(np.max(np.abs(out - ref) / dtypes.bounds(ref, tasks.tolerance(task))))


def worst_error(task: Task, cand: Candidate, folder: Path, runtime: Path, sizes=SIZES, modes=MODES) -> float:
    """The worst error ratio over `sizes` and `modes`, or the first one past 1 (enough to fail)."""
    exe = build(cand, folder, runtime)
    worst = 0.0
    for size in sizes:
        for mode in modes:
            ratio = error_ratio(task, cand, exe, size, mode, folder)
            if not ratio <= 1.0:
                return ratio
            worst = max(worst, ratio)
    return worst


def combinations(cand: Candidate) -> list[dict[str, int]]:
    """All switches off and on, each alone, the small tiles and one stage with every switch on and
    off, and each tile size alone with every switch on."""
    names = [f.name for f in cand.features if not f.name.startswith("WG")]  # the mma.sync kernel's switches
    on = {n: 1 for n in names}
    small = {"BLOCK_M": 64, "BLOCK_N": 32}
    return ([{}, on] + [{n: 1} for n in names]
            + [base | extra for base in ({}, on) for extra in (small, {"STAGES": 1}, small | {"STAGES": 1})]
            + [on | {"BLOCK_M": 64}, on | {"BLOCK_N": 32}])


@pytest.mark.parametrize("name", TASKS)
def test_every_switch_and_tile_computes_the_reference(name, tmp_path, emulation_runtime):
    task, cand = load(name)
    combos = combinations(cand)
    folders = [tmp_path / str(i) for i in range(len(combos))]
    for f in folders:
        f.mkdir()
    with ThreadPoolExecutor(max_workers=2) as pool:
        worst = list(pool.map(lambda v, f: worst_error(task, candidate.with_defines(cand, v), f, emulation_runtime), combos, folders))
    bad = [(v, w) for v, w in zip(combos, worst, strict=True) if not w <= 1.0]
    assert not bad, bad
    assert max(worst) > 0.1  # o is rounded to bfloat16: an exact result would mean the check saw nothing


@pytest.mark.parametrize("name", TASKS)
def test_the_baseline_computes_the_reference(name, tmp_path, emulation_runtime):
    task, _ = load(name)
    base = candidate.parse(task.baseline_source, task)
    worst = [worst_error(task, candidate.with_defines(base, {"WARPS": w}), tmp_path, emulation_runtime, SIZES[:3],
                         MODES[::3]) for w in (4, 2)]
    assert 0.1 < max(worst) <= 1.0, worst


@pytest.mark.parametrize("old, new, why", [
    ("        copy_wait<STAGES - 2>();\n        __syncthreads();", "        copy_wait<STAGES - 2>();",
     "a stage is refilled and read without the barrier"),
    ("mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));", "",
     "the row max taken over half the quad"),
    ("mma_bf16(o[2 * dp], a, bk[dp]);", "mma_bf16(o[2 * dp], a, bk[dp] + 2);", "V's fragment halves swapped"),
    ("const bool ok = FULL || r0 + r < seq;", "const bool ok = true;", "rows past seq copied from outside the inputs"),
])
def test_a_broken_template_fails_the_emulation(old, new, why, tmp_path, emulation_runtime):
    task, cand = load("attention_bf16")
    assert old in cand.source
    broken = dataclasses.replace(cand, source=cand.source.replace(old, new, 1))
    with pytest.raises(AssertionError):
        assert worst_error(task, broken, tmp_path, emulation_runtime, SIZES[1:3], MODES[:2]) <= 1.0, why


@pytest.mark.parametrize("old, new, why", [
    ("#define CAUSAL 1", "#define CAUSAL 0", "the variant's define lost: attention_bf16's kernel"),
    ("((key) < valid && (key) <= diag + 8 * ((r) / 2))", "((key) < valid)", "the causal mask dropped"),
    ("if (j0 > w + 15) return;", "if (j0 > w - 16) return;", "a warp skips the tile of its own diagonal"),
    ("min(m0 + BLOCK_M, seq) + BLOCK_N - 1", "min(m0 + BLOCK_M / 2, seq) + BLOCK_N - 1",
     "the block stops at the keys of its first half of rows"),
    ("if (valid >= BLOCK_N && (!CAUSAL || j0 + BLOCK_N - 1 <= w))", "if (valid >= BLOCK_N)",
     "tiles that cross the diagonal scored without the mask"),
])
def test_a_broken_causal_template_fails_the_emulation(old, new, why, tmp_path, emulation_runtime):
    task, cand = load("attention_bf16_causal")
    assert old in cand.source
    broken = candidate.with_defines(dataclasses.replace(cand, source=cand.source.replace(old, new, 1)),
                                    {"FULL_TILES": 1})
    with pytest.raises(AssertionError):
        assert worst_error(task, broken, tmp_path, emulation_runtime, SIZES[2:], MODES[:1]) <= 1.0, why
