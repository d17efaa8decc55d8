"""The bf16 attention template's WGMMA path on the host, no GPU: with WGMMA on, the header runs
only the wgmma launch, at every test size of both tasks, its tensor maps legal there (rank 3,
128-byte swizzle, half-row boxes); its grid is one block a WG_BM rows of a head, its block a
producer and its consumer warp groups, its shared memory Q beside a whole number of K/V stages (two
or more) within 227 KiB; with WGMMA off only the mma.sync launch. The compiled wgmma kernel (NVRTC,
sm_90a) is what the switches promise at every switch combination and every tunable value: wgmma
for S (shared operands) and for P V (P from registers), 3-d TMA copies, register hand-over with two
consumers, named barriers with ping-pong, no local memory, and no wgmma serialised by ptxas.

The kernel's tile arithmetic is emulated in NumPy with the template's own formulas (read from its
source: the key tiles a block takes, the condition under which a tile is masked, the mask) and
its accumulator layout (thread t of a consumer: rows 16 (t / 32) + t % 32 / 4 and + 8, keys
8 j + 2 (t % 4) + e), in both orders of the products (WG_OVERLAP: O rescaled after the next
tile's softmax), with P rounded to bfloat16: it must meet the task's tolerance at every test
size, and a mask or tile count made wrong must not. That the tiles arrive and multiply right is
for the GPU (tests/gpu/test_wgmma_attention.py)."""

from __future__ import annotations

import ast
import itertools
import math
import re

import numpy as np
import pytest

from fsr import candidate, dtypes, tasks
from tests.support.precision import problem
from tests.support.templates import COMPILER

ml_dtypes = pytest.importorskip("ml_dtypes")

NAMES = ("attention_bf16", "attention_bf16_causal")
WG = ("WG_BLOCK_N", "WG_STAGES", "WG_CONSUMERS")
SWITCHES = ("WG_OVERLAP", "WG_PINGPONG")
SMEM_OPTIN = 227 * 1024
RESERVED = 2048  # the tiles' 1024-byte alignment and the barriers after the stages


def template(name: str) -> tuple[tasks.Task, candidate.Candidate]:
    task = tasks.load(name)
    return task, candidate.parse(task.template_source, task)


def wg_combinations(cand: candidate.Candidate) -> list[dict[str, int]]:
    tunables = {t.name: t.values for t in cand.tunables + cand.features if t.name in WG + SWITCHES}
    assert set(tunables) == set(WG + SWITCHES)
    names = WG + SWITCHES
    return [dict(zip(names, v, strict=True)) for v in itertools.product(*(tunables[n] for n in names))]


@pytest.mark.parametrize("name", NAMES)
def test_the_wgmma_launch_runs_at_every_size_with_legal_maps_and_fits(name):
    task, cand = template(name)
    sizes = [dict(s) for s in task.test_sizes + (task.bench_size,)]
    for values in wg_combinations(cand):
        one = candidate.with_defines(cand, values | {"WGMMA": 1})
        candidate.check(one, task)  # every size: a launch runs, its maps are legal
        consumers, bn = values["WG_CONSUMERS"], values["WG_BLOCK_N"]
        q_bytes, stage = 64 * consumers * 256, 2 * bn * 256  # Q's rows; a K and a V tile, 256 bytes a row
        for size in sizes:
            (launch, (grid, block, smem)), = candidate.launches_at(one, size)
            assert launch.kernel == "attention_bf16_wgmma", (values, size)
            assert grid == (math.ceil(size["seq"] / (64 * consumers)), size["bh"]), (values, size)
            assert block == (128 * (consumers + 1),)
            stages, rest = divmod(smem - RESERVED - q_bytes, stage)
            assert rest == 0 and 2 <= stages <= values["WG_STAGES"] and smem <= SMEM_OPTIN, (values, smem)
            assert stages == values["WG_STAGES"] or smem + stage > SMEM_OPTIN  # capped only where needed
            maps = candidate.resolve_maps(one, task, size, [launch])
            assert maps["q_tiles"].box == (64, 64 * consumers, 1)
            assert maps["k_tiles"].box == maps["v_tiles"].box == (64, bn, 1)
            for m in maps.values():  # a head's rows end its box: TMA fills past seq with zeros
                assert m.dims == (128, size["seq"], size["bh"]) and m.swizzle == "128B"
                assert m.strides_bytes == (256, 256 * size["seq"])


@pytest.mark.parametrize("name", NAMES)
def test_with_wgmma_off_only_the_mma_sync_launch_runs(name):
    task, cand = template(name)
    for size in task.test_sizes + (task.bench_size,):
        (launch, _), = candidate.launches_at(cand, dict(size))
        assert launch.kernel == "attention_bf16_template"


def test_a_box_wider_than_the_swizzle_span_is_refused():
    """The rule that makes a 128-dim row two boxes: 128 bf16 (256 bytes) under the 128-byte swizzle."""
    task, cand = template("attention_bf16")
    wide = cand.source.replace('box = ["64", "WG_BLOCK_N", "1"]', 'box = ["128", "WG_BLOCK_N", "1"]', 1)
    assert wide != cand.source
    one = candidate.with_defines(candidate.parse(wide, task), {"WGMMA": 1})
    with pytest.raises(candidate.HeaderError, match="swizzle span"):
        candidate.check(one, task)


def compiled(name: str, values: dict[str, int]):
    task, cand = template(name)
    return COMPILER.compile(candidate.with_defines(cand, values | {"WGMMA": 1}), "sm_90")


def opcodes(result) -> list[str]:
    from fsr.evaluate import diagnose

    functions = diagnose.disassemble(result.cubin)
    if functions is None:
        pytest.skip("nvdisasm is not installed")
    (kernel,) = [k for k in functions if k.endswith("_wgmma")]
    return functions[kernel]


# every switch combination at default tunables (both tasks), then each other tunable value once
COMPILES = ([(n, {"WG_OVERLAP": o, "WG_PINGPONG": p, "WG_CONSUMERS": c})
             for n in NAMES for o, p, c in itertools.product((0, 1), (0, 1), (2, 1))]
            + [("attention_bf16", {"WG_BLOCK_N": 176, "WG_OVERLAP": 1, "WG_PINGPONG": 1}),
               ("attention_bf16_causal", {"WG_BLOCK_N": 176}),
               ("attention_bf16_causal", {"WG_BLOCK_N": 64, "WG_OVERLAP": 1, "WG_PINGPONG": 1}),
               ("attention_bf16", {"WG_BLOCK_N": 64, "WG_CONSUMERS": 1}),
               ("attention_bf16", {"WG_STAGES": 2, "WG_OVERLAP": 1}),
               ("attention_bf16_causal", {"WG_STAGES": 3, "WG_BLOCK_N": 64, "WG_PINGPONG": 1})])


@pytest.mark.parametrize("name,values", COMPILES, ids=[f"{n}-" + "-".join(f"{k}{v}" for k, v in d.items())
                                                       for n, d in COMPILES])
def test_the_wgmma_kernel_compiles_to_what_its_switches_promise(name, values):
    result = compiled(name, values)
    (registers,) = [r.registers for k, r in result.kernel_resources if k.endswith("_wgmma")]
    consumers = values.get("WG_CONSUMERS", 2)
    if consumers == 2:
        assert registers == 168  # the cap setmaxnreg's 40 + 2 x 232 (x 128 threads) fits in
    assert "serialized" not in result.log, result.log  # ptxas kept the wgmmas asynchronous
    ops = opcodes(result)
    steps = values.get("WG_BLOCK_N", 128) // 16  # k16 steps of P V
    # S: 8 k16 steps over 128 dims; P V: steps; WG_OVERLAP issues S for tile 0 before its loop and
    # the last P V after it
    assert ops.count("HGMMA.64") == (16 + 2 * steps if values.get("WG_OVERLAP") else 8 + steps)
    assert sum(o.startswith("UTMALDG.3D") for o in ops) == 6  # Q, K, V: two half-row boxes each
    handover = [o for o in ops if o.startswith("USETMAXREG")]
    assert len(handover) == (2 if consumers == 2 else 0)
    named = sum(o.startswith(("BAR.ARV", "BAR.SYNC")) for o in ops) - 1  # beyond the start's __syncthreads
    assert (named > 0) == bool(values.get("WG_PINGPONG") and consumers == 2)
    assert not [o for o in ops if o.startswith(("LDL", "STL", "HMMA"))]


# ---- the tile arithmetic, emulated with the template's own formulas ----------------------------
WGMMA_SECTION = "// ---- Hopper: TMA and wgmma"
NUMPY_OPS = {ast.And: np.logical_and, ast.Or: np.logical_or, ast.Lt: np.less, ast.LtE: np.less_equal,
             ast.Gt: np.greater, ast.GtE: np.greater_equal, ast.Add: np.add, ast.Sub: np.subtract,
             ast.Mult: np.multiply, ast.FloorDiv: np.floor_divide}


class Formulas:
    """The WGMMA kernel's block rows, tile count, edge condition and mask as its source writes them
    (C expressions read with ast, evaluated over NumPy arrays)."""

    def __init__(self, source: str, causal: int):
        wgmma = source.split(WGMMA_SECTION)[1]
        self.causal = causal
        if causal:
            m0 = self._c(wgmma, r"#if CAUSAL\n\s*const int m0 = (.*?);")
            total = self._c(wgmma, r"#if CAUSAL\n.*?\n\s*const int total = (.*?);")
        else:
            m0 = self._c(wgmma, r"#else\n\s*const int m0 = (.*?), total")
            total = self._c(wgmma, r"#else\n\s*const int m0 = .*?, total = (.*?);")
        self.m0, self.total = m0, total
        self.edge = self._c(wgmma, r"const bool edge = (.*?);")
        self.keep = self._c(wgmma, r"if \(edge && !\((.*?)\)\) x = -INFINITY;")

    @staticmethod
    def _c(source: str, pattern: str) -> ast.expr:
        match = re.search(pattern, source)
        assert match, pattern
        text = match.group(1).replace("||", " or ").replace("&&", " and ").replace("!", " not ")
        text = re.sub(r"jb\.", "", text).replace("/", "//").replace("blockIdx.x", "bx").replace("gridDim.x", "gx")
        return ast.parse(text.strip(), mode="eval").body

    def eval(self, node: ast.expr, **names):
        names = names | {"CAUSAL": self.causal}
        if isinstance(node, ast.BoolOp):
            values = [self.eval(v, **names) for v in node.values]
            out = values[0]
            for value in values[1:]:
                out = NUMPY_OPS[type(node.op)](out, value)
            return out
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return np.logical_not(self.eval(node.operand, **names))
        if isinstance(node, ast.Compare):
            (op,), (right,) = node.ops, node.comparators
            return NUMPY_OPS[type(op)](self.eval(node.left, **names), self.eval(right, **names))
        if isinstance(node, ast.BinOp):
            return NUMPY_OPS[type(node.op)](self.eval(node.left, **names), self.eval(node.right, **names))
        if isinstance(node, ast.Call) and node.func.id == "min":
            return np.minimum(*(self.eval(a, **names) for a in node.args))
        if isinstance(node, ast.Name):
            return names[node.id]
        if isinstance(node, ast.Constant):
            return node.value
        raise AssertionError(ast.dump(node))


def emulate(formulas: Formulas, q, k, v, bn: int, consumers: int, overlap: bool) -> np.ndarray:
    """o as the WGMMA kernel computes it, block by block and consumer by consumer: float32 scores in
    log2 units, the tiles the block takes, masked where the kernel masks (row 16 w + g + 8 h of a
    consumer is register half h of thread r0 = its row - 8 h), P rounded to bfloat16, the sum of
    weights over unrounded p, O rescaled before P V or (WG_OVERLAP) after the next softmax."""
    bh, seq, _ = q.shape
    bm = 64 * consumers
    gx = -(-seq // bm)
    scale = np.float32(math.log2(math.e) / math.sqrt(128))
    out = np.full(q.shape, np.nan, np.float32)
    half = np.arange(64) % 16 // 8  # register half h of each of a consumer's 64 rows

    def rows(x, first, n):  # rows [first, first + n) of a head, zeros past seq (TMA's fill)
        part = x[first:min(first + n, seq)]
        return np.concatenate([part, np.zeros((n - part.shape[0], 128), np.float32)])

    for h, bx in itertools.product(range(bh), range(gx)):
        m0 = int(formulas.eval(formulas.m0, bx=bx, gx=gx, WG_BM=bm))
        total = int(formulas.eval(formulas.total, m0=m0, seq=seq, WG_BM=bm, WG_BN=bn))
        for c in range(consumers):
            first = m0 + 64 * c
            qc, r0 = rows(q[h], first, 64), first + np.arange(64) - 8 * half
            m, weights = np.full(64, -np.inf, np.float32), np.zeros(64, np.float32)
            o, pending = np.zeros((64, 128), np.float32), None
            for kt in range(total):
                key0 = kt * bn
                s = (qc @ rows(k[h], key0, bn).T) * scale
                if formulas.eval(formulas.edge, key0=key0, WG_BN=bn, seq=seq, first=m0):
                    keep = formulas.eval(formulas.keep, key=key0 + np.arange(bn)[None, :], seq=seq,
                                         r0=r0[:, None], h=half[:, None])
                    s = np.where(keep, s, -np.inf)
                mx = np.maximum(m, s.max(axis=1))
                corr = np.exp2(m - mx)
                p = np.exp2(s - mx[:, None])
                m, weights = mx, weights * corr + p.sum(axis=1)
                pv = (p.astype(ml_dtypes.bfloat16).astype(np.float32), rows(v[h], key0, bn))
                if overlap:  # P V of the tile before lands first, then the rescaling
                    o = (o + (pending[0] @ pending[1] if pending else 0)) * corr[:, None]
                    pending = pv
                else:
                    o = o * corr[:, None] + pv[0] @ pv[1]
            if pending:
                o = o + pending[0] @ pending[1]
            n = max(0, min(64, seq - first))
            out[h, first:first + n] = (o / weights[:, None])[:n]
    return out.astype(ml_dtypes.bfloat16).astype(np.float64)


def worst(task, formulas: Formulas, bn: int, consumers: int, overlap: bool) -> float:
    ratio = 0.0
    for size in task.test_sizes:
        size = dict(size)
        size = {"bh": min(size["bh"], 2), "seq": size["seq"]}  # more heads add nothing to the tile arithmetic
        inputs, ref = problem(task, size, "o")
        q, k, v = (inputs[n].astype(np.float32) for n in ("q", "k", "v"))
        out = emulate(formulas, q, k, v, bn, consumers, overlap)
        if np.isnan(out).any():
            return math.inf  # a row left unwritten
        ratio = max(ratio, float(np.max(np.abs(out - ref) / dtypes.bounds(ref, tasks.tolerance(task)))))
    return ratio


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bn,consumers,overlap", [(128, 2, False), (128, 2, True), (176, 1, True), (64, 2, False)])
def test_the_tile_arithmetic_computes_the_reference(name, bn, consumers, overlap):
    task, cand = template(name)
    formulas = Formulas(cand.source, int(name.endswith("causal")))
    assert 0.05 < worst(task, formulas, bn, consumers, overlap) <= 1.0


@pytest.mark.parametrize("old, new, why", [
    ("(key < jb.seq && (!CAUSAL || key <= jb.r0 + 8 * h))", "(key < jb.seq && (!CAUSAL || key <= jb.r0))",
     "a thread's second row masked as its first"),
    ("const bool edge = key0 + WG_BN > jb.seq || (CAUSAL && key0 + WG_BN - 1 > jb.first);",
     "const bool edge = key0 + WG_BN > jb.seq;", "tiles across the diagonal left unmasked"),
    ("const int total = (min(m0 + WG_BM, seq) + WG_BN - 1) / WG_BN;",
     "const int total = (min(m0 + WG_BM / 2, seq) + WG_BN - 1) / WG_BN;", "the block stops at its first group's keys"),
])
def test_a_wrong_formula_fails_the_emulation(old, new, why):
    task, cand = template("attention_bf16_causal")
    assert cand.source.count(old) == 1
    formulas = Formulas(cand.source.replace(old, new), 1)
    assert not worst(task, formulas, 64, 2, True) <= 1.0, why


def test_keys_past_seq_must_be_masked():
    task, cand = template("attention_bf16")
    old = "const bool edge = key0 + WG_BN > jb.seq || (CAUSAL && key0 + WG_BN - 1 > jb.first);"
    assert cand.source.count(old) == 1
    formulas = Formulas(cand.source.replace(old, "const bool edge = key0 < 0;"), 0)  # never masked
    assert not worst(task, formulas, 128, 2, False) <= 1.0
