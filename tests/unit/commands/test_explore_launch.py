"""`fsr explore` and `fsr launch` without a GPU: configurations, ranking, defines, sizes and the
error ratio as pure functions; bad input in one line (exit 2); no device in one line (exit 3)."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fsr import candidate as cfmt
from fsr import certification, cli, commands, tasks
from fsr.commands import UsageError
from fsr.commands.explore import (
    Row,
    check_names,
    combinations,
    fixed,
    rank,
    read_configs,
    row_of,
    to_markdown,
)
from fsr.commands.launch import _library_outputs, choose_sizes, error_ratio, inputs_at, parse_define, planned
from fsr.dtypes import Tolerance
from fsr.types import DeviceInfo, Evaluation, Resources, Timing, Verdict
from tests.support.paths import ROOT

TEMPLATE = str(ROOT / "tasks" / "softmax" / "template.cu")


def softmax_template():
    task = tasks.load("softmax")
    return task, cfmt.parse(task.template_source or "", task)


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(args))
    except SystemExit as e:  # argparse
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def no_gpu(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fsr", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})


# -- explore: configurations and ranking -------------------------------------------------------

def test_combinations_start_with_all_on_then_defaults_then_all_but_one_and_are_distinct():
    _, template = softmax_template()
    names = [f.name for f in template.features]
    configs = combinations(template, 40, seed=0)
    assert configs[0] == dict.fromkeys(names, 1)
    assert configs[1] == {f.name: f.values[0] for f in template.features}
    assert configs[2] == dict.fromkeys(names, 1) | {names[0]: 0}
    assert len(configs) == len({json.dumps(c, sort_keys=True) for c in configs}) <= 40
    assert combinations(template, 40, seed=0) == configs  # seeded
    assert len(combinations(template, 3, seed=0)) == 3 and combinations(template, 0, seed=0) == []


def test_fixed_pins_named_tunables_and_sets_switches():
    _, template = softmax_template()
    cand = fixed(template, {"BLOCK": 512, "VEC4": 1})
    assert {t.name: t.values for t in cand.tunables}["BLOCK"] == (512,)
    assert dict(cand.resolved_defines())["VEC4"] == 1 and dict(cand.resolved_defines())["BLOCK"] == 512
    free = fixed(template, {"VEC4": 1})
    assert {t.name: t.values for t in free.tunables}["BLOCK"] == {t.name: t.values for t in template.tunables}["BLOCK"]


def test_configurations_naming_what_the_template_lacks_are_refused():
    _, template = softmax_template()
    check_names(template, [{"VEC4": 1, "BLOCK": 128}])
    with pytest.raises(UsageError, match="NOPE"):
        check_names(template, [{"VEC4": 1}, {"NOPE": 1}])


def test_configs_files_are_a_list_or_a_task_entry_and_anything_else_is_refused(tmp_path):
    listed, keyed, bad, broken = (tmp_path / n for n in ("a.json", "b.json", "c.json", "d.json"))
    listed.write_text('[{"VEC4": 1}]')
    keyed.write_text('{"softmax": [{"BLOCK": 128}], "sgemm": [{"TX": 8}]}')
    bad.write_text('[{"VEC4": "on"}]')
    broken.write_text("[{")
    assert read_configs([str(listed), str(keyed)], "softmax") == [{"VEC4": 1}, {"BLOCK": 128}]
    assert read_configs([str(keyed)], "scan") == []
    for path, said in ((bad, "NAME: integer"), (broken, "not JSON"), (tmp_path / "none.json", "no such file")):
        with pytest.raises(UsageError, match=said):
            read_configs([str(path)], "softmax")


def evaluation(verdict: Verdict, median_us: float | None = None) -> Evaluation:
    timing = None if median_us is None else Timing(median_us, median_us, median_us, median_us, (median_us,),
                                                   gbps=1000.0 / median_us, tflops=0.0, ceiling_fraction=50.0 / median_us)
    return Evaluation("id", "softmax", verdict, message="line one\nline two", timing=timing,
                      resources=Resources(registers=32), tuned_defines=(("BLOCK", 256),), baseline_us=200.0)


def test_rows_rank_fastest_first_and_failures_after_in_order():
    rows = [row_of({"A": 1}, evaluation(Verdict.OK, 120.0)), row_of({"A": 2}, evaluation(Verdict.COMPILE_ERROR)),
            row_of({"A": 3}, evaluation(Verdict.OK, 80.0)), row_of({"A": 4}, evaluation(Verdict.WRONG)),
            row_of({"A": 5}, evaluation(Verdict.SUSPECT, 10.0))]
    assert [r.config["A"] for r in rank(rows)] == [3, 1, 2, 4, 5]
    assert rows[4].median_us is None  # a SUSPECT timing is not ranked with the correct ones
    assert rows[1].message == "line one line two" and rows[0].defines == {"BLOCK": 256}


def test_markdown_table_gives_ceiling_and_comparator_ratios_and_lists_failures():
    device = DeviceInfo("GPU", "sm_90", copy_gbps=3000.0, sgemm_tflops=50.0)
    ranked = rank([Row({"A": 1}, "OK", median_us=100.0, gbps=10.0, tflops=0.5, ceiling_fraction=0.5, registers=32,
                       defines={"A": 1, "BLOCK": 256}),
                   Row({"A": 2}, "WRONG", message="3 of 4 elements wrong")])
    text = to_markdown("softmax", device, {"baseline": 200.0, "library": 50.0, "torch": None}, ranked, top=5)
    row = next(line for line in text.splitlines() if line.startswith("| 100.0"))
    assert "50.0%" in row and "2.00x" in row and "0.50x" in row and "| - |" in row and "A=1 BLOCK=256" in row
    assert "- WRONG {'A': 2}: 3 of 4 elements wrong" in text


# -- launch: defines, sizes, error ratio --------------------------------------------------------

def test_defines_parse_name_equals_integer_and_refuse_anything_else():
    assert parse_define("BLOCK=256") == ("BLOCK", 256) and parse_define(" VEC4 =1") == ("VEC4", 1)
    for text in ("BLOCK", "BLOCK=", "BLOCK=2.5", "=3", "1X=2", "A-B=1"):
        with pytest.raises(argparse.ArgumentTypeError, match="NAME=INTEGER"):
            parse_define(text)


def test_sizes_are_bench_by_default_indices_or_all_without_repeats():
    task = tasks.load("softmax")
    assert choose_sizes(task, []) == [task.bench_size]
    assert choose_sizes(task, ["0", "bench", "0"]) == [task.test_sizes[0], task.bench_size]
    assert choose_sizes(task, ["all"]) == [*task.test_sizes, task.bench_size]
    for spec in (str(len(task.test_sizes)), "-1", "big"):
        with pytest.raises(UsageError, match="test size's index"):
            choose_sizes(task, [spec])


def test_the_plan_gives_each_launch_at_each_size_from_the_header():
    task, template = softmax_template()
    runs = planned(cfmt.with_defines(template, {"BLOCK": 128}), [task.test_sizes[0], task.bench_size])
    assert [len(r.launches) for r in runs] == [1, 1]
    kernel, grid, block, smem = runs[1].launches[0]
    assert kernel == "softmax_template" and block == (128,) and grid == (dict(task.bench_size)["rows"],)


def test_launch_draws_a_certification_set_from_its_recorded_seed_as_certification_drew_it():
    task = tasks.load("softmax")
    size = task.test_sizes[1]
    recorded = certification.set_inputs(task, certification.test_set(size), 2**62 + 5)
    drawn = inputs_at(task, size, 2**62 + 5)
    assert drawn.keys() == recorded.keys() and all(np.array_equal(drawn[k], recorded[k]) for k in drawn)
    assert not np.array_equal(inputs_at(task, size, 2**62 + 6)["x"], recorded["x"])


def test_error_ratio_is_one_at_the_tolerance_and_infinite_for_nan_or_a_miss_with_no_tolerance():
    ref = np.array([0.0, 10.0, -4.0])
    assert error_ratio(ref, ref, Tolerance(1e-3, 1e-4)) == 0.0
    at_tolerance = ref + np.array([1e-3, 1e-3 + 1e-3, 0.0])  # atol + rtol * |10|
    assert math.isclose(error_ratio(at_tolerance, ref, Tolerance(1e-3, 1e-4)), 1.0)
    assert error_ratio(np.array([0.0, 10.0, np.nan]), ref, Tolerance(1e-3, 1e-4)) == math.inf
    counts = np.array([3, 0, 7])
    assert error_ratio(counts, counts, Tolerance(0.0, 0.0)) == 0.0
    assert error_ratio(counts + np.array([0, 1, 0]), counts, Tolerance(0.0, 0.0)) == math.inf


def test_error_ratio_of_a_bfloat16_output_uses_the_magnitude_floor_and_rejects_zeros():
    ref = np.array([1e-6, 2.0, -2.0, 4.0])  # mean |ref| 2: the floor holds the small one to 1e-2 * 2
    tol = Tolerance(0.0, 1e-2, 1.0)
    near = (ref + np.array([1e-2, 0.0, 0.0, 0.0])).astype("bfloat16")
    assert 0.45 <= error_ratio(near, ref, tol) <= 0.55  # 1e-2 off on 1e-6: half of 1e-2 * 2
    assert error_ratio(np.zeros(4, "bfloat16"), ref, tol) >= 50  # |ref| / (rtol |ref|) on the large ones
    assert error_ratio(near, ref, Tolerance(0.0, 1e-2)) > 100  # without the floor, 1e-2 on 1e-6 fails


# -- the commands ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "said"), [
    (("launch", "softmax", TEMPLATE, "--define", "BLOCK"), ["--define", "NAME=INTEGER"]),
    (("launch", "softmax", TEMPLATE, "-D", "NOPE=1"), ["NOPE"]),
    (("launch", "softmax", TEMPLATE, "--size", "99"), ["--size 99"]),
    (("launch", "softmax", TEMPLATE, "--launches", "0"), ["--launches"]),
    (("launch", "softmax", TEMPLATE, "--seed", "-1"), ["--seed"]),
    (("launch", "softmax", "missing.cu"), ["missing.cu"]),
    (("launch", "nope", TEMPLATE), ["nope"]),
    (("explore", "softmax", "--combos", "0"), ["no configurations"]),
    (("explore", "softmax", "--combos", "-1"), ["--combos"]),
    (("explore", "softmax", "--trials", "-1"), ["--trials"]),
    (("explore", "softmax", "--configs", "missing.json"), ["missing.json"]),
    (("explore", "nope"), ["nope"]),
])
def test_bad_input_is_one_line_and_exit_2(capsys, args, said):
    code, _, err = run_main(capsys, *args)
    assert code == commands.EXIT_USAGE, err
    assert err.count("\n") == 1 and err.startswith("fsr: error:") and "Traceback" not in err, err
    for s in said:
        assert s in err, err


def test_a_define_that_breaks_a_launch_expression_is_one_line(capsys, tmp_path):
    baseline = (ROOT / "tasks" / "softmax" / "baseline.cu").read_text()
    kernel = baseline.replace('block = ["BLOCK"]', 'block = ["BLOCK + 8192 / (BLOCK - 128)"]')
    path = tmp_path / "k.cu"
    path.write_text(kernel)
    code, _, err = run_main(capsys, "launch", "softmax", str(path), "-D", "BLOCK=128")
    assert code == commands.EXIT_USAGE and err.count("\n") == 1 and err.startswith("fsr: error:"), err


def test_launch_without_a_gpu_compiles_shows_the_launches_and_exits_3():
    out = no_gpu("launch", "softmax", TEMPLATE, "-D", "VEC4=1", "--size", "0", "--json")
    assert out.returncode == commands.EXIT_NO_DEVICE, out.stderr
    assert out.stderr.count("\n") == 1 and "needs a CUDA device" in out.stderr and "Traceback" not in out.stderr
    shown = json.loads(out.stdout)
    assert shown["launched"] is False and shown["defines"]["VEC4"] == 1 and shown["resources"]["registers"] > 0
    assert shown["sizes"][0]["launches"][0]["kernel"] == "softmax_template"


def test_explore_without_a_gpu_is_one_line_and_exit_3():
    out = no_gpu("explore", "softmax", "--combos", "2")
    assert out.returncode == commands.EXIT_NO_DEVICE, out.stderr
    assert out.stderr.count("\n") == 1 and "needs a CUDA device" in out.stderr and not out.stdout


def test_launch_of_a_bfloat16_task_without_a_gpu_names_its_dtype_and_floored_tolerance(tmp_path):
    task = tasks.load("softmax_bf16")  # softmax's template with BF16 1, as the task resolves it
    path = str(tmp_path / "template.cu")
    Path(path).write_text(task.template_source or "")
    out = no_gpu("launch", "softmax_bf16", path, "-D", "VEC4=1", "--size", "0", "--json")
    assert out.returncode == commands.EXIT_NO_DEVICE, out.stderr
    shown = json.loads(out.stdout)
    assert shown["output_dtypes"] == {"y": "bfloat16"}
    assert shown["tolerance"] == {"atol": 0.0, "rtol": 0.01, "floor": 1.0}
    assert shown["sizes"][0]["launches"][0]["kernel"] == "softmax_template"


def test_a_library_that_refuses_a_size_is_said_in_one_line_and_a_working_one_answers(monkeypatch, capsys):
    """`fsr launch --error`: the attention tasks' library (cuDNN pinned) raises where cuDNN refuses
    a size; the kernel's error ratios stand and stderr names the library, the size and why."""
    cupy = pytest.importorskip("cupy")
    monkeypatch.setattr(cupy, "asarray", lambda a: a)  # no device: the host arrays stand in
    task = tasks.load("attention_bf16")
    inputs = {"q": np.zeros((1, 2, 128), np.float32)}

    class Refusing:
        @staticmethod
        def library(inputs, sizes):
            raise RuntimeError("cuDNN attention refused or failed at q (1, 1, 2, 128)\nsecond line")

    class Working:
        @staticmethod
        def library(inputs, sizes):
            return {"o": inputs["q"], "sizes": sizes}

    assert _library_outputs(task, Refusing, inputs, (("bh", 1), ("seq", 2))) is None
    said = capsys.readouterr().err
    assert said == ("fsr launch: attention_bf16's library (cuDNN SDPA) did not run at bh=1,seq=2: cuDNN attention "
                    "refused or failed at q (1, 1, 2, 128) second line\n")
    got = _library_outputs(task, Working, inputs, (("bh", 1), ("seq", 2)))
    assert got["sizes"] == {"bh": 1, "seq": 2} and got["o"].shape == (1, 2, 128) and capsys.readouterr().err == ""
