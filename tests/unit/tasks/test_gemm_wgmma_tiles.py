"""The bf16 GEMM templates' WGMMA launch covers C: at every combination of WG_GROUP and the tile
shape (WG_BN, WG_MT, WG_CONSUMERS), the grid the header gives (its [[launch]] through fsr's own
launches_at, at every test size, the bench size and sizes whose last band of WG_GROUP block rows
is partial) and the template's wg_tile, compiled by g++ from the template's text, give every tile
of C to exactly one block: none twice, none missed, and no block outside C (the kernel has no
early return: such a block would load and multiply a tile nobody stores). Broken mappings and
grids, made by substitutions in the template, must fail. No GPU is needed; g++ is."""

from __future__ import annotations

import collections
import itertools
import math
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fsr import candidate, tasks
from fsr.types import Candidate, Task
from tests.support import wgmma_host

if shutil.which("g++") is None:
    pytest.skip("g++ is needed to build wg_tile for the host", allow_module_level=True)

NAMES = ("gemm_bf16", "gemm_bf16_gelu")
SHAPE = ("WG_BN", "WG_MT", "WG_CONSUMERS", "WG_GROUP")  # what the mapping and the grid depend on
MAIN = """
int main() {  // stdin: M N blocks, one line a launch; stdout: WG_BM WG_BN, then m0 n0 a block
    int M, N;
    unsigned blocks;
    printf("%d %d\\n", WG_BM, WG_BN);
    while (scanf("%d %d %u", &M, &N, &blocks) == 3) {
        gridDim.x = blocks;
        for (unsigned b = 0; b < blocks; ++b) {
            int m0, n0;
            blockIdx.x = b;
            wg_tile(M, N, m0, n0);
            printf("%d %d\\n", m0, n0);
        }
    }
}
"""


def template(name: str) -> tuple[Task, Candidate]:
    task = tasks.load(name)
    return task, candidate.parse(task.template_source, task)


def combinations(cand: Candidate) -> list[dict[str, int]]:
    tunables = {t.name: t.values for t in cand.tunables if t.name in SHAPE}
    assert set(tunables) == set(SHAPE)
    return [dict(zip(SHAPE, v, strict=True)) for v in itertools.product(*(tunables[n] for n in SHAPE))]


def sizes(task: Task, values: dict[str, int]) -> list[dict[str, int]]:
    """The task's test sizes and bench size, and sizes of 1, 2 and 1 + a partial band of
    WG_GROUP block rows (ragged edges on M and N, K and N multiples of 8: the WGMMA launch's)."""
    bm = 64 * min(values["WG_MT"], 256 // values["WG_BN"]) * values["WG_CONSUMERS"]
    bn, group = values["WG_BN"], values["WG_GROUP"]
    extra = [{"M": bm * group, "N": bn * 3, "K": 64}, {"M": bm * 2 * group - 5, "N": bn * 4 - 8, "K": 128},
             {"M": bm * (group + 3) + 1, "N": bn * 5 + 8, "K": 64}, {"M": bm * (2 * group + 1) - 1, "N": 8, "K": 8}]
    return [dict(s) for s in task.test_sizes + (task.bench_size,)] + extra


def coverage(blocks: list[tuple[int, int]], M: int, N: int, bm: int, bn: int) -> list[str]:
    """What is wrong with the blocks' tiles (m0, n0) of an M x N C in bm x bn tiles: tiles
    given to two blocks or more, tiles no block has, blocks outside C or off the tile grid."""
    want = {(bm * i, bn * j) for i in range(math.ceil(M / bm)) for j in range(math.ceil(N / bn))}
    count = collections.Counter(blocks)
    problems = [f"tile {t} given to {k} blocks" for t, k in count.items() if k > 1 and t in want]
    problems += [f"tile {t} given to no block" for t in sorted(want - count.keys())]
    problems += [f"{k} blocks at {t}, not a tile of C" for t, k in count.items() if t not in want]
    return problems


def launches(cand: Candidate, values: dict[str, int], size: dict[str, int]) -> list[int]:
    """The WGMMA kernel's block count at `size` (the header's grid), [] where it does not run."""
    one = candidate.with_defines(cand, values | {"WGMMA": 1})
    out = []
    for launch, (grid, _, _) in candidate.launches_at(one, size):
        if launch.kernel.endswith("_wgmma"):
            assert len(grid) == 1, grid  # wg_tile reads blockIdx.x alone
            out.append(grid[0])
    return out


def check(cand: Candidate, task: Task, values: dict[str, int], folder: Path) -> list[str]:
    """Every problem of the WGMMA launch's tiles at every size of `values`, as (size: problem)."""
    runs = [(s, blocks) for s in sizes(task, values) for blocks in launches(cand, values, s)]
    assert sum(s["K"] % 8 == 0 and s["N"] % 8 == 0 for s, _ in runs) == len(runs) and len(runs) >= 6
    src = (wgmma_host.STUBS + wgmma_host.defines(cand, values) + wgmma_host.macros(cand)
           + wgmma_host.function(cand, "wg_tile") + MAIN)
    exe = wgmma_host.compile_program(src, folder)
    stdin = "".join(f"{s['M']} {s['N']} {blocks}\n" for s, blocks in runs)
    run = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True)
    if run.returncode:  # a division by zero in the mapping traps on the host (undefined on the GPU)
        return [f"wg_tile stopped with exit status {run.returncode}"]
    out = run.stdout.split()
    bm, bn = int(out[0]), int(out[1])
    assert (bm, bn) == (64 * min(values["WG_MT"], 256 // values["WG_BN"]) * values["WG_CONSUMERS"], values["WG_BN"])
    pairs = iter(zip(map(int, out[2::2]), map(int, out[3::2]), strict=True))
    problems = []
    for s, blocks in runs:
        mapped = list(itertools.islice(pairs, blocks))
        problems += [f"{s}: {p}" for p in coverage(mapped, s["M"], s["N"], bm, bn)[:3]]
    return problems


@pytest.mark.parametrize("name", NAMES)
def test_every_tile_of_c_has_exactly_one_block(name, tmp_path):
    task, cand = template(name)
    combos = combinations(cand)
    folders = [tmp_path / str(i) for i in range(len(combos))]
    for f in folders:
        f.mkdir()
    with ThreadPoolExecutor(max_workers=2) as pool:
        found = list(pool.map(lambda v, f: check(cand, task, v, f), combos, folders))
    bad = [(v, p[:3]) for v, p in zip(combos, found, strict=True) if p]
    assert not bad, bad


def test_the_coverage_check_sees_each_kind_of_fault():
    tiles = [(0, 0), (0, 128), (64, 0), (64, 128)]  # 2 x 2 tiles of 64 x 128 over a 100 x 200 C
    assert coverage(tiles, 100, 200, 64, 128) == []
    assert coverage(tiles[:3] + [(0, 0)], 100, 200, 64, 128) == ["tile (0, 0) given to 2 blocks",
                                                                 "tile (64, 128) given to no block"]
    assert coverage(tiles + [(128, 0)], 100, 200, 64, 128) == ["1 blocks at (128, 0), not a tile of C"]
    assert coverage(tiles[:3] + [(64, 64)], 100, 200, 64, 128) == ["tile (64, 128) given to no block",
                                                                   "1 blocks at (64, 64), not a tile of C"]


GRID = '"cdiv(N, WG_BN) * cdiv(M, 64 * min(WG_MT, 256 // WG_BN) * WG_CONSUMERS)"'
BROKEN = [
    ("m0 = (WG_GROUP * band + in_band % rows) * WG_BM;", "m0 = (WG_GROUP * band + in_band % WG_GROUP) * WG_BM;",
     "the last, partial band walked as if whole"),
    ("n0 = in_band / rows * WG_BN;", "n0 = in_band / WG_GROUP * WG_BN;", "columns of a partial band counted by whole bands"),
    ("const int band = bid / (WG_GROUP * tiles_n)", "const int band = bid / (WG_GROUP * tiles_m)", "bands of the wrong size"),
    (f"grid = [{GRID}]", 'grid = ["cdiv(N, WG_BN) * cdiv(M, 64 * WG_MT * WG_CONSUMERS)"]',
     "the grid without the accumulators' cap on WG_MT"),
    (f"grid = [{GRID}]", f'grid = [{GRID[:-1]} + 1"]', "one block too many"),
]


@pytest.mark.parametrize("old, new, why", BROKEN)
def test_a_broken_mapping_or_grid_fails(old, new, why, tmp_path):
    task, cand = template("gemm_bf16")
    assert cand.source.count(old) == 1
    broken = candidate.parse(cand.source.replace(old, new), task)
    values = {"WG_BN": 256, "WG_MT": 2, "WG_CONSUMERS": 1, "WG_GROUP": 8}
    assert check(cand, task, values, tmp_path) == []
    assert check(broken, task, values, tmp_path), why

