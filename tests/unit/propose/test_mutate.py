"""The offline proposer: every proposal parses, moves do what they say, transforms are safe."""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from fsr import tasks
from fsr.candidate import check, kernel_signatures, parse, with_defines
from fsr.propose import launch_space, transforms
from fsr.propose.base import ProposalRequest, Proposals, Scored
from fsr.propose.features import detect
from fsr.propose.mutate import MutateProposer
from fsr.tasks import list_tasks, load
from fsr.testing.fakes import softmax_task
from fsr.types import Candidate, Task


def scored(cand: Candidate) -> Scored:
    return Scored(cand, None, detect(cand))


def all_tasks() -> list[Task]:
    return [load(t) for t in list_tasks()] + [softmax_task()]


def parents_of(task: Task) -> list[Candidate]:
    out = [parse(task.baseline_source, task)]
    if task.template_source:
        template = parse(task.template_source, task)
        out += [template, with_defines(template, {t.name: max(t.values) for t in template.features})]
    return out


def propose(task: Task, parents: list[Candidate], seed: int, n: int = 3, **kw) -> Proposals:
    request = ProposalRequest(task, tuple(scored(p) for p in parents), n=n, seed=seed, **kw)
    return MutateProposer().propose(request)


@pytest.mark.parametrize("task", all_tasks(), ids=lambda t: f"{t.name}{'+tmpl' if t.template_source else ''}")
def test_every_proposal_parses_and_names_its_origin(task):
    wanted = [(), ("VEC4",), ("UNROLL", "READONLY"), ("LAUNCH_BOUNDS",), ("FAST_MATH",)]
    parents = parents_of(task)
    count = 0
    for seed in range(40):
        first = parents[seed % len(parents)]
        chain = [first, parents[(seed + 1) % len(parents)]]
        out = propose(task, chain, seed, features_wanted=wanted[seed % len(wanted)],
                      features_unwanted=("VEC4",) if seed % 7 == 0 else ())
        for cand in out.candidates:
            again = parse(cand.source, task)  # the text alone is a valid candidate
            check(cand, task)  # and so is it at its defines
            assert again.launches == cand.launches
            assert cand.origin.proposer == "mutate" and cand.origin.move
            assert cand.parents and cand.parents[0] == first.id
            assert cand.id != first.id
            count += 1
        assert out.dropped == len(out.errors)
    assert count > 60


def test_proposals_are_reproducible_from_the_seed():
    task = softmax_task()
    parents = parents_of(task)[:2]
    a = [c.id for c in propose(task, parents, seed=5, n=4).candidates]
    b = [c.id for c in propose(task, parents, seed=5, n=4).candidates]
    assert a == b and len(a) == 4


def test_toggle_turns_on_a_requested_switch_and_records_the_request():
    task = softmax_task()
    template = parse(task.template_source, task)
    for seed in range(10):
        out = propose(task, [template], seed, n=1, features_wanted=("VEC4",))
        cand = out.candidates[0]
        assert cand.origin.features_requested == ("VEC4",)
        if cand.origin.move.startswith("toggle"):
            assert "VEC4" in detect(cand) and cand.origin.move == "toggle +VEC4"
            return
    pytest.fail("no toggle in ten tries although the request named a template switch")


def test_toggle_from_a_hand_written_parent_starts_from_the_template_with_its_features():
    task = softmax_task()
    baseline = parse(task.baseline_source, task)
    hand = replace(baseline, source=baseline.source.replace("float m = -INFINITY;", "float m = -INFINITY; // float4 soon"))
    parent = Scored(hand, None, frozenset({"WARP_SHUFFLE"}))
    request = ProposalRequest(task, (parent,), n=1, seed=0, features_wanted=("VEC4",))
    proposer = MutateProposer()
    for seed in range(20):
        out = proposer.propose(replace(request, seed=seed))
        cand = out.candidates[0]
        if cand.origin.move.startswith("toggle"):
            assert {"VEC4", "WARP_SHUFFLE"} <= detect(cand)
            return
    pytest.fail("no toggle")


def test_unwanted_feature_is_switched_off():
    task = softmax_task()
    everything = parents_of(task)[2]
    for seed in range(20):
        cand = propose(task, [everything], seed, n=1, features_unwanted=("ONLINE",)).candidates[0]
        if cand.origin.move.startswith("toggle"):
            assert "ONLINE" not in detect(cand) and cand.origin.features_requested == ("-ONLINE",)
            return
    pytest.fail("no toggle")


def test_crossover_takes_switches_from_both_parents():
    task = softmax_task()
    template = parse(task.template_source, task)
    a = with_defines(template, {"VEC4": 1, "ONLINE": 1})
    b = with_defines(template, {"WARP_SHUFFLE": 1, "UNROLL": 1})
    seen_moves = set()
    for seed in range(40):
        for cand in propose(task, [a, b], seed, n=2).candidates:
            if cand.origin.move.startswith("crossover"):
                seen_moves.add(cand.origin.move)
                assert cand.parents == (a.id, b.id)
                feats = detect(cand) & {"VEC4", "ONLINE", "WARP_SHUFFLE", "UNROLL"}
                assert feats not in ({"VEC4", "ONLINE"}, {"WARP_SHUFFLE", "UNROLL"})
    assert seen_moves


def test_tunable_move_reorders_the_default_or_sets_a_define():
    task = softmax_task()
    template = parse(task.template_source, task)
    for seed in range(60):
        for cand in propose(task, [template], seed, n=2).candidates:
            if "default" in cand.origin.move:
                value = int(cand.origin.move.split()[-1])
                assert parse(cand.source, task).tunables[0].values[0] == value
                assert dict(cand.resolved_defines())["BLOCK"] == value
                return
    pytest.fail("no default reordering in 60 seeds")


def test_a_broken_transform_is_dropped_and_counted(monkeypatch):
    task = softmax_task(template=None)  # baseline: BLOCK has one value, so only transforms apply

    def breaks_header(cand, task, rng):
        return cand.source.replace("[[launch]]", "[[lunch]]"), "broken"

    monkeypatch.setattr(transforms, "ALL", (breaks_header,))
    monkeypatch.setattr(transforms, "BY_FEATURE", {})
    monkeypatch.setattr(launch_space, "rewrites", lambda cand, task: iter(()))
    out = propose(task, [parse(task.baseline_source, task)], seed=0, n=2)
    assert out.candidates == () and out.dropped > 0 and "lunch" in out.errors[0]


def test_supported_features_are_template_switches_plus_transform_features():
    features = MutateProposer().describe(softmax_task()).features
    assert {"VEC4", "WARP_SHUFFLE", "ONLINE", "UNROLL", "READONLY", "LAUNCH_BOUNDS", "FAST_MATH"} == set(features)
    assert set(MutateProposer().describe(softmax_task(None)).features) == set(transforms.BY_FEATURE)


# ---- generic transforms -------------------------------------------------------------------------

def baseline(task_name: str = "softmax") -> tuple[Task, Candidate]:
    task = load(task_name)
    return task, parse(task.baseline_source, task)


@pytest.mark.parametrize("task_name", list_tasks())
def test_restrict_marks_every_pointer_parameter(task_name):
    task, cand = baseline(task_name)
    text, _ = transforms.add_restrict(cand, task, random.Random(0))
    pointers = sum(sum(params) for params in kernel_signatures(text).values())  # every kernel's
    assert text.count("__restrict__") == pointers
    assert transforms.add_restrict(parse(text, task), task, random.Random(0)) is None  # idempotent


def test_restrict_leaves_macro_qualified_parameters_alone():
    task, cand = baseline()
    macro = replace(cand, source=cand.source.replace("const float* x", "const float* RESTRICT x"))
    text, _ = transforms.add_restrict(macro, task, random.Random(0))
    assert "RESTRICT x" in text and "__restrict__ RESTRICT" not in text


def test_unroll_goes_before_a_loop_without_a_pragma():
    task, cand = baseline()
    text, move = transforms.add_unroll(cand, task, random.Random(1))
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if "#pragma unroll" in line)
    assert lines[i + 1].lstrip().startswith("for") and move.startswith("unroll")


def test_launch_bounds_go_before_global_and_keep_the_kernel_found():
    task, cand = baseline()
    text, _ = transforms.add_launch_bounds(cand, task, random.Random(0))
    assert "__launch_bounds__((BLOCK)) __global__" in text
    assert "softmax_baseline" in kernel_signatures(text)
    assert transforms.add_launch_bounds(parse(text, task), task, random.Random(0)) is None


def test_launch_bounds_stay_off_a_kernel_with_a_register_cap():
    # nvcc refuses __launch_bounds__ beside __maxnreg__ (a COMPILE_ERROR the offline search met
    # three times in 314 evaluations): attention_bf16's WGMMA kernel carries its cap through a
    # macro (WG_BOUNDS), its mma.sync kernel its bound (BOUNDS), so neither takes another
    task = tasks.load("attention_bf16")
    cand = with_defines(parse(task.template_source, task), {"WGMMA": 1})
    assert transforms.add_launch_bounds(cand, task, random.Random(0)) is None
    task, cand = baseline()
    capped = cand.source.replace("__global__", "__global__ __maxnreg__(64)", 1)
    assert transforms.add_launch_bounds(parse(capped, task), task, random.Random(0)) is None
    assert transforms.add_launch_bounds(cand, task, random.Random(0)) is not None  # uncapped: bounded


def test_launch_bounds_need_a_block_made_of_tunables():
    task, cand = baseline()
    sized = replace(cand, launches=(replace(cand.launches[0], block=("min(cols, 256)",)),))
    assert transforms.add_launch_bounds(sized, task, random.Random(0)) is None


def test_fast_math_respects_the_task_tolerance():
    task, cand = baseline()
    text, _ = transforms.use_fast_math(cand, task, random.Random(0))
    assert "__expf(" in text and " expf(" not in text
    assert transforms.use_fast_math(cand, replace(task, rtol=1e-7), random.Random(0)) is None


def test_ldg_wraps_const_reads_only():
    task, cand = baseline("layernorm")
    text, _ = transforms.use_ldg(cand, task, random.Random(0))
    assert "__ldg(&xr[c])" in text and "__ldg(&weight[c])" in text
    assert "yr[c] =" in text and "__ldg(&yr" not in text


def test_ldg_leaves_device_functions_alone():
    """The sgemm template reads its shared-memory tiles through const pointers in device
    functions (`af[A_AT(...)]`); __ldg on them faulted on the GPU (cudaErrorInvalidAddressSpace).
    Its typedef of const pointers is not a pointer either."""
    task = load("sgemm")
    cand = parse(task.template_source, task)
    assert "typedef const float* ARows[RM];" in cand.source and "af[A_AT(" in cand.source
    assert transforms.use_ldg(cand, task, random.Random(0)) is None


LDG_KERNELS = r"""
__device__ float first(const float* p) { return p[0]; }
extern "C" __global__ void k(const float* x, float* y, int n) {
    __shared__ float tile[256];
    float regs[4];
    const float* row = x + blockIdx.x * n;
    const float* near = row + 1;
    const float* t = tile + threadIdx.x;
    const float* r = regs;
    const float* mixed = threadIdx.x ? row : tile;
    tile[threadIdx.x] = row[threadIdx.x] + near[0] + x[n];
    regs[0] = t[0] + r[0] + mixed[0] + first(row);
    y[threadIdx.x] = regs[0];
}
extern "C" __global__ void k2(const float* z, float* y) {
    __shared__ float s2[32];
    y[0] = z[0];
    { float* z = s2; y[1] = z[1]; }
}
"""


def test_ldg_reads_only_pointers_to_global_memory():
    task, cand = baseline()
    text, _ = transforms.use_ldg(replace(cand, source=cand.source.split("*/", 1)[0] + "*/" + LDG_KERNELS), task,
                                 random.Random(0))
    for name in ("row[threadIdx.x]", "near[0]", "x[n]"):
        assert f"__ldg(&{name})" in text
    for name in ("t[0]", "r[0]", "mixed[0]", "p[0]", "z[0]", "z[1]"):  # shared, local, either, a device
        # function's; a parameter a pointer to shared memory shadows in an inner block
        assert f"__ldg(&{name})" not in text and name in text


@pytest.fixture(scope="module")
def nvrtc():
    from fsr.evaluate.compile import CompileService

    compile_candidate = CompileService().compile
    try:
        compile_candidate(parse(load("softmax").baseline_source, load("softmax")), "sm_90")
    except Exception as e:  # no NVRTC on this machine
        pytest.skip(f"NVRTC unavailable: {e}")
    return compile_candidate


def test_transformed_and_toggled_kernels_compile(nvrtc):
    proposed = [(task, cand) for task in [load(t) for t in list_tasks()] + [softmax_task()]
                for seed in range(4)
                for cand in propose(task, parents_of(task), seed, n=3, features_wanted=("READONLY", "UNROLL")).candidates]

    def failure(task: Task, cand: Candidate) -> tuple[str, str, str] | None:
        try:
            nvrtc(cand, "sm_90")
        except Exception as e:
            return task.name, cand.origin.move, str(e)[:300]
        return None

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 2)) as pool:  # NVRTC releases the GIL
        failures = [f for f in pool.map(lambda tc: failure(*tc), proposed) if f is not None]
    assert len(proposed) > 100 and not failures
