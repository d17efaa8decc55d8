"""Tensor maps and `when` in a candidate's header, checked against the task and the code with no
GPU: a map illegal at one of the task's sizes is a one-line header error naming the size, a
fallback launch keeps the candidate right at the sizes where no map can be made, and the
kernel's parameters must take the maps as `const __grid_constant__ CUtensorMap`."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fsr import candidate, lineage, tasks
from fsr.candidate import HeaderError
from fsr.evaluate.compile import CompileService
from fsr.evaluate.static import static_stage
from fsr.types import Evaluation, LaunchSpec, Verdict
from tests.support.paths import DATA

GEMM = tasks.load("gemm_bf16")
TMA_PATH = DATA / "tma" / "gemm_bf16_tma.cu"
TMA = TMA_PATH.read_text()


def edited(old: str, new: str, text: str = TMA) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def test_the_tma_gemm_runs_its_map_launch_where_rows_are_16_byte_aligned_and_its_plain_one_elsewhere():
    cand = candidate.parse(TMA, GEMM)
    ran = {}
    for size in GEMM.test_sizes + (GEMM.bench_size,):
        sizes = dict(size)
        (launch, _), = candidate.launches_at(cand, sizes)  # exactly one of the two, at every size
        ran[size] = launch.kernel
        aligned = sizes["K"] % 8 == 0 and sizes["N"] % 8 == 0
        assert launch.kernel == ("gemm_tma" if aligned else "gemm_plain"), size
        maps = candidate.resolve_maps(cand, GEMM, sizes, [launch])
        assert set(maps) == ({"a_tiles", "b_tiles"} if aligned else set())
    assert ran[GEMM.bench_size] == "gemm_tma" and "gemm_plain" in ran.values()
    a = candidate.resolve_maps(cand, GEMM, {"M": 77, "N": 136, "K": 72}, list(cand.launches[:1]))["a_tiles"]
    assert (a.dims, a.strides_bytes, a.box, a.element_type) == ((72, 77), (144,), (32, 64), "BFLOAT16")


def test_a_map_that_cannot_be_made_at_a_test_size_is_the_headers_one_line_error():
    always = edited('when = "K % 8 == 0 and N % 8 == 0"\n', "")
    with pytest.raises(HeaderError, match=r"^tensormap a_tiles: the stride of dimension 1 is 2 bytes \(1 elements "
                                          r"of 2\); .* at M=1,N=1,K=1$"):
        candidate.parse(always, GEMM)


def test_a_header_error_is_the_static_stages_rejection_without_a_gpu():
    cand = candidate.parse(TMA, GEMM)
    bad = replace(cand, source=edited('box = ["32", "64"]', 'box = ["30", "64"]'),
                  tensormaps=(replace(cand.tensormaps[0], box=("30", "64")), cand.tensormaps[1]))
    static = static_stage(bad, GEMM, "sm_90", CompileService())
    assert static.verdict is not None and static.verdict.verdict == Verdict.REJECTED
    assert static.verdict.message.startswith("header: tensormap a_tiles: the box's inner extent is 60 bytes")


@pytest.mark.parametrize(("old", "new", "reason"), [
    ("const __grid_constant__ CUtensorMap a_tiles", "const CUtensorMap a_tiles",
     "'a_tiles' is a tensor map, so its parameter must be `const __grid_constant__ CUtensorMap a_tiles`"),
    ("const __grid_constant__ CUtensorMap a_tiles", "__grid_constant__ CUtensorMap a_tiles", "must be `const"),
    ("const __grid_constant__ CUtensorMap a_tiles", "const CUtensorMap* a_tiles", "must be `const"),
    ('args = ["a_tiles", "b_tiles", "C"', 'args = ["A", "b_tiles", "C"',
     "parameter `const __grid_constant__ CUtensorMap a_tiles` takes a tensor map, but 'A' is no"),
    ('args = ["A", "B", "C"', 'args = ["a_tiles", "B", "C"', "'a_tiles' is a tensor map, so its parameter"),
    ('buffer = "A"', 'buffer = "D"', "tensormap a_tiles: buffer 'D' is not a task or scratch buffer"),
    ('name = "b_tiles"', 'name = "a_tiles"', "'a_tiles' is declared twice"),
    ('name = "b_tiles"', 'name = "K"', "'K' is declared twice or clashes"),
    ('name = "b_tiles"', 'name = "b-tiles"', "'b-tiles' is not an identifier"),
    ('when = "K % 8 != 0 or N % 8 != 0"', 'when = "K % 8 != 0 or L"', "gemm_plain: when: unknown name 'L'"),
    ('when = "K % 8 != 0 or N % 8 != 0"', 'when = "K %"', "cannot parse expression"),
    ("[[tensormap]]\nname = \"a_tiles\"", "[[tensormap]]\nname = \"a_tiles\"\nrank = 2", "unknown key\\(s\\) rank"),
])
def test_a_header_whose_maps_do_not_fit_the_task_or_the_code_is_refused(old, new, reason):
    with pytest.raises(HeaderError, match=reason) as refused:
        candidate.parse(edited(old, new), GEMM)
    assert "\n" not in str(refused.value)


def test_no_launch_at_a_size_is_refused_by_name():
    text = edited('when = "K % 8 != 0 or N % 8 != 0"', 'when = "(K % 8 != 0 or N % 8 != 0) and M > 1"')
    with pytest.raises(HeaderError, match=r"^no launch runs at M=1,N=1,K=1: every launch's `when` is false"):
        candidate.parse(text, GEMM)


def test_export_keeps_maps_when_and_cluster():
    cand = candidate.parse(edited('block = [256]\nargs = ["A"', 'block = [256]\ncluster = ["1", "1"]\nargs = ["A"'),
                           GEMM)
    again = candidate.parse(candidate.export(cand), GEMM)
    assert again.tensormaps == cand.tensormaps and again.launches == cand.launches
    assert again.launches[1].cluster == ("1", "1") and again.launches[0].when == "K % 8 == 0 and N % 8 == 0"


def test_a_launch_without_the_new_fields_reads_as_before_so_candidate_ids_stay():
    spec = LaunchSpec("k", ("cdiv(n, 256)",), ("256",), ("x", "n"))
    # the text a frozen dataclass of the five first fields shows, which the ids hash
    assert repr(spec) == "LaunchSpec(kernel='k', grid=('cdiv(n, 256)',), block=('256',), args=('x', 'n'), smem='0')"
    assert "when='n > 1'" in repr(replace(spec, when="n > 1")) and "cluster=('2',)" in repr(replace(spec, cluster=("2",)))
    base = candidate.parse(GEMM.baseline_source, GEMM)
    assert replace(base, tensormaps=()).id == base.id


def test_a_candidate_with_maps_round_trips_through_the_lineage():
    cand = candidate.parse(TMA, GEMM)
    assert lineage.candidate_from_json(lineage.candidate_to_json(cand)) == cand
    row = lineage.evaluation_row(cand, Evaluation(cand.id, GEMM.name, Verdict.WRONG, "x"))
    back = lineage.candidate_from_row(row)
    assert back == replace(cand, origin=back.origin) and back.id == cand.id
    plain = candidate.parse(GEMM.baseline_source, GEMM)
    assert "tensormaps" not in lineage.evaluation_row(plain, Evaluation(plain.id, GEMM.name, Verdict.OK))["launches"]
