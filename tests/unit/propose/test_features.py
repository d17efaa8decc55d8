"""Feature detectors on real kernels and snippets (positive and negative), the #if evaluator, and
the Thompson-sampling policy, alone and inside a search with a planted good feature."""

from __future__ import annotations

import math
import random
import zlib
from collections import Counter

import pytest

from fsr.candidate import parse, with_defines
from fsr.config import SearchConfig
from fsr.lineage import LineageWriter, read
from fsr.propose.cpp import Unknown, active_source, evaluate
from fsr.propose.features import CATALOGUE, NAMES, FeaturePolicy, detect, detect_source, feature_name
from fsr.propose.mutate import MutateProposer
from fsr.search.loop import run_campaign
from fsr.search.state import CampaignState
from fsr.tasks import list_tasks, load
from fsr.testing.fakes import TEMPLATE, FakeEvaluator, FakeExecutor, softmax_task
from fsr.types import Verdict
from tests.support.paths import ROOT


def kernel(body: str) -> str:
    return f'extern "C" __global__ void k(const float* x, float* y, int n) {{\n{body}\n}}\n'


# One snippet per feature that must be tagged, and near misses that must not be.
POSITIVE = {
    "COALESCE": kernel("    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i];"),
    "VEC4": kernel("    float4 v = reinterpret_cast<const float4*>(x)[threadIdx.x];"),
    "SMEM_TILE": kernel("    __shared__ float tile[32][33];\n    tile[threadIdx.y][threadIdx.x] = x[0];"),
    "WARP_SHUFFLE": kernel("    float v = x[0];\n    v += __shfl_down_sync(0xffffffff, v, 16);"),
    "REG_BLOCK": kernel("    float acc[4][4] = {};\n    y[0] = acc[0][0];"),
    "UNROLL": kernel("#pragma unroll 4\n    for (int i = 0; i < 4; ++i) y[i] = x[i];"),
    "LAUNCH_BOUNDS": 'extern "C" __global__ void __launch_bounds__(256) k(float* y) { y[0] = 1.0f; }',
    "READONLY": kernel("    y[0] = __ldg(&x[0]);"),
    "ASYNC_COPY": kernel('    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" :: "r"(0), "l"(x));'),
    "TENSOR_CORE": kernel("    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, half, nvcuda::wmma::row_major> a;"),
    "ONLINE": kernel("    float m = -INFINITY, s = 0.0f;\n    float v = x[0], mn = fmaxf(m, v);\n"
                     "    s = s * expf(m - mn) + expf(v - mn);"),
    "FAST_MATH": kernel("    y[0] = __expf(x[0]);"),
    "DOUBLE_BUFFER": kernel("    __shared__ float buf[2][128];\n    int stage = 0;\n    stage ^= 1;"),
}
NEGATIVE = {
    "COALESCE": kernel("    for (int i = 0; i < n; ++i) y[i] = x[i];"),
    "VEC4": kernel("    float v4 = x[0]; float f = 4.0f; y[0] = v4 * f;"),
    "SMEM_TILE": kernel("    __shared__ float red[32];\n    red[threadIdx.x] = x[0];"),
    "WARP_SHUFFLE": kernel("    // __shfl_xor_sync would be faster here\n    y[0] = x[0];"),
    "REG_BLOCK": 'float table[4] = {1, 2, 3, 4};\n' + kernel("    __shared__ float s[64];\n    y[0] = x[0];"),
    "UNROLL": kernel('    _Pragma("unroll 1")\n    for (int i = 0; i < n; ++i) y[i] = x[i];'),
    "LAUNCH_BOUNDS": kernel("    /* __launch_bounds__(256) */ y[0] = x[0];"),
    "READONLY": kernel("    y[0] = x[0];"),
    "ASYNC_COPY": kernel("    y[0] = x[0];  // a plain copy, not memcpy_async"),
    "TENSOR_CORE": kernel("    float comma = x[0]; y[0] = comma;"),
    "ONLINE": kernel("    float s = 0.0f, inv = 1.0f;\n    s += expf(x[0]);\n    y[0] = inv * expf(x[1]);"),
    "FAST_MATH": kernel("    y[0] = expf(x[0]) + logf(x[1]);"),
    "DOUBLE_BUFFER": kernel("    __shared__ float tile[32][2];\n    int buffer_count = 2;"),
}


def test_catalogue_names_are_unique_and_documented():
    assert len(set(NAMES)) == len(NAMES) == len(CATALOGUE)
    assert all(f.what and f.detects and f.hints for f in CATALOGUE)
    assert set(POSITIVE) == set(NAMES) == set(NEGATIVE)


@pytest.mark.parametrize("name", NAMES)
def test_detector_tags_its_feature(name):
    assert name in detect_source(POSITIVE[name])


@pytest.mark.parametrize("name", NAMES)
def test_detector_ignores_near_misses(name):
    assert name not in detect_source(NEGATIVE[name])


# Features a plain kernel of the task cannot avoid, so the policy learns nothing from them there:
# a multi-pass scan reduces and scans its chunks with block-stride loops, as quant_fp8's one block
# per row does its row, one thread per attention row keeps that row's d accumulators in a local
# array, and one warp per row of the bfloat16 attentions (head dim 128, four dims a lane) sums
# each dot product by shuffles.
INHERENT = {"scan": frozenset({"COALESCE"}), "quant_fp8": frozenset({"COALESCE"}),
            "attention": frozenset({"REG_BLOCK"}),
            "attention_bf16": frozenset({"WARP_SHUFFLE"}), "attention_bf16_causal": frozenset({"WARP_SHUFFLE"})}


@pytest.mark.parametrize("task", list_tasks())
def test_plain_baselines_have_no_optimisation_features(task):
    assert detect_source(load(task).baseline_source) == INHERENT.get(task, frozenset())


def test_hand_optimised_softmax_example_is_tagged():
    found = detect_source((ROOT / "examples" / "softmax_fast.cu").read_text())
    assert {"VEC4", "WARP_SHUFFLE", "ONLINE", "FAST_MATH", "READONLY", "UNROLL", "LAUNCH_BOUNDS", "COALESCE"} <= found
    assert not found & {"TENSOR_CORE", "ASYNC_COPY", "DOUBLE_BUFFER", "SMEM_TILE"}


def template_tasks():
    tasks = [load(t) for t in list_tasks()]
    return [t for t in tasks if t.template_source] + [softmax_task()]


@pytest.mark.parametrize("task", template_tasks(), ids=lambda t: f"{t.name}-{zlib.crc32(t.template_source.encode()) % 1000}")
def test_template_switches_decide_detection(task):
    template = parse(task.template_source, task)
    off = detect(with_defines(template, {t.name: 0 for t in template.features if 0 in t.values}))
    on = detect(with_defines(template, {t.name: max(t.values) for t in template.features}))
    assert {feature_name(t.name) for t in template.features} <= on
    # what a switch guards with #if is not seen while the switch is off
    assert not {"VEC4", "WARP_SHUFFLE"} & off & {feature_name(t.name) for t in template.features}


def test_test_template_default_is_plain_block_per_row():
    task = softmax_task()
    assert detect(parse(TEMPLATE, task)) == {"COALESCE"}


def test_fast_math_compile_option_counts():
    task = softmax_task()
    base = parse(task.baseline_source, task)
    from dataclasses import replace
    assert "FAST_MATH" in detect(replace(base, compile_options=("--use_fast_math",)))


# ---- the #if evaluator --------------------------------------------------------------------------

def test_active_source_follows_if_elif_else_on_defines():
    src = "a\n#if X && !Y\nb\n#elif Y == 2\nc\n#else\nd\n#endif\ne"
    assert active_source(src, {"X": 1, "Y": 0}).split() == ["a", "b", "e"]
    assert active_source(src, {"X": 1, "Y": 2}).split() == ["a", "c", "e"]
    assert active_source(src, {"X": 0, "Y": 1}).split() == ["a", "d", "e"]


def test_active_source_keeps_every_branch_of_an_unknown_condition():
    src = "#if __CUDA_ARCH__ >= 800\nnew\n#else\nold\n#endif\n#ifdef X\nx\n#endif"
    assert active_source(src, {"X": 1}).split() == ["new", "old", "x"]


def test_active_source_learns_defines_and_nests():
    src = "#define TPR 32\n#if A\n#if TPR == 32\nwarp\n#else\nblock\n#endif\n#endif"
    assert "warp" in active_source(src, {"A": 1}) and "block" not in active_source(src, {"A": 1})
    assert "warp" not in active_source(src, {"A": 0})


def test_active_source_evaluates_macros_over_known_names():
    src = ("#define BOTH (A && B)\n#define TILE (N * 4)\n#define LOAD(p) (p)\n#define ODD (N ? 1 : 0)\n"
           "#if BOTH\nboth\n#endif\n#if TILE > 8\nbig\n#endif\n#if ODD\nodd\n#else\neven\n#endif")
    off = active_source(src, {"A": 1, "B": 0, "N": 3})
    assert "both" not in off and off.split()[-2:] == ["big", "odd"]
    on = active_source(src, {"A": 1, "B": 1, "N": 0})
    assert "both" in on and "big" not in on and on.split()[-1] == "even"
    # a macro of an unknown name decides nothing: both branches stay
    assert active_source("#define M (Q + 1)\n#if M\nm\n#else\nn\n#endif", {}).split()[-2:] == ["m", "n"]


def test_conditional_operator_takes_one_branch_and_refuses_what_does_not_pair():
    assert evaluate("(ITEMS < 48 ? ITEMS : 48) * 2", {"ITEMS": 96}) == 96
    assert evaluate("A ? B ? 1 : 2 : 3", {"A": 1, "B": 0}) == 2  # right-associative
    assert evaluate("A ? 1 : B ? 2 : 3", {"A": 0, "B": 0}) == 3
    assert evaluate("A ? Q : 2", {"A": 0}) == 2  # the branch not taken may name anything
    for text in ("A ? Q : 2", "A ? 1", "A : 1", "(A ? 1 : 2", "A) ? 1 : 2"):
        with pytest.raises(Unknown):
            evaluate(text, {"A": 1})


# ---- the policy ---------------------------------------------------------------------------------

def test_posterior_moves_towards_observed_log_speedups():
    policy = FeaturePolicy(["A", "B"])
    for _ in range(20):
        policy.observe("A", math.log(2.0))
    mean, sd = policy.posterior("A")
    assert 0.6 < mean < math.log(2.0) and sd < policy.posterior("B")[1]
    assert policy.posterior("B") == (0.0, policy.PRIOR_SD)


def test_learn_credits_added_and_removed_features_and_penalises_failures():
    policy = FeaturePolicy(["A", "B", "C"])
    policy.learn(frozenset({"B"}), frozenset({"A"}), parent_us=200.0, child_us=100.0, verdict=Verdict.OK)
    assert policy.total["A"] == pytest.approx(math.log(2)) and policy.total["B"] == pytest.approx(-math.log(2))
    policy.learn(frozenset(), frozenset({"C"}), parent_us=100.0, child_us=None, verdict=Verdict.COMPILE_ERROR)
    assert policy.total["C"] < 0
    policy.learn(frozenset(), frozenset({"C"}), parent_us=100.0, child_us=None, verdict=Verdict.SUSPECT)
    assert policy.count["C"] == 1


def test_choose_prefers_a_feature_that_paid_off():
    policy = FeaturePolicy(["GOOD", "NEUTRAL", "BAD"])
    rng = random.Random(0)
    for _ in range(10):
        policy.observe("GOOD", math.log(2.0) + rng.gauss(0, 0.1))
        policy.observe("NEUTRAL", rng.gauss(0, 0.1))
        policy.observe("BAD", math.log(0.7) + rng.gauss(0, 0.1))
    asked = Counter(f for _ in range(500) for f in policy.choose(frozenset(), rng).wanted)
    assert asked["GOOD"] > 3 * asked["NEUTRAL"] and asked["NEUTRAL"] > asked["BAD"]
    removed = Counter(f for _ in range(500) for f in policy.choose(frozenset({"GOOD", "BAD"}), rng).unwanted)
    assert removed["BAD"] > 3 * removed["GOOD"]


def test_search_learns_a_planted_good_feature(tmp_path):
    """VEC4 halves the latency, UNROLL does nothing: after a short search the policy, rebuilt from
    the lineage, asks for VEC4 far more often than for UNROLL."""
    task = softmax_task()
    evaluator = FakeEvaluator(effects={"VEC4": 2.0}, noise=0.02)
    config = SearchConfig(max_evaluations=120, seed=3)
    with LineageWriter(tmp_path) as writer:
        run_campaign([task], FakeExecutor(evaluator, slots=8), MutateProposer(), config, writer)
    state = CampaignState([task], config, lambda t: MutateProposer().describe(t).features)
    state.load(read(tmp_path))
    policy = state.tasks[task.name].policy
    assert policy.posterior("VEC4")[0] > 0.3 > abs(policy.posterior("UNROLL")[0])
    rng = random.Random(1)
    asked = Counter(f for _ in range(400) for f in policy.choose(frozenset(), rng).wanted)
    assert asked["VEC4"] > 2 * asked["UNROLL"]
    rows = read(tmp_path).to_pylist()
    assert all(r["features_detected"] is not None for r in rows)
    assert any("VEC4" in r["features_requested"] for r in rows)
