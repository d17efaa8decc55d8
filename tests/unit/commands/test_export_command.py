"""`fsr export RUN_DIR TASK` without a GPU: the module of a run's best kernel (its tuned values,
where it was judged), and bad input in one line with exit 2: no directory, no best/, an unknown
task, a task the run has no kernel of, a kernel no OK evaluation of the run is of."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from fsr import candidate as cfmt
from fsr import cli, lineage, run_json, tasks
from fsr.commands.run import _export_best
from fsr.types import Evaluation, Timing, Verdict

TIMING = Timing(100.0, 95.0, 110.0, 90.0, (100.0,), 1000.0, 1.0, 0.5)


def make_run(tmp_path: Path, task_name: str = "softmax", which: str = "template", tuned: tuple = (),
             verdict: Verdict = Verdict.OK) -> Path:
    """A run directory whose lineage holds one evaluation of the task's baseline or template,
    with best/ written as `fsr run` writes it."""
    run = tmp_path / "runs" / "r1"
    task = tasks.load(task_name)
    cand = cfmt.parse(getattr(task, f"{which}_source"), task)
    timed = verdict == Verdict.OK
    evaluation = Evaluation(cand.id, task.name, verdict, timing=TIMING if timed else None, tuned_defines=tuned,
                            device="NVIDIA H200", baseline_us=300.0, toolchain="nvrtc 13.0")
    run_json.write_run_json(run, {}, {"tasks": [task.name]})
    with lineage.LineageWriter(run) as writer:
        writer.append(cand, evaluation)
    _export_best(run)
    return run


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def test_the_best_kernel_is_written_beside_it_with_its_tuned_values(tmp_path, capsys):
    run = make_run(tmp_path, tuned=(("BLOCK", 512), ("UNROLL_BY", 8)))
    assert cli.main(["export", str(run), "softmax"]) == 0
    out = run / "best" / "softmax.py"
    assert capsys.readouterr().out.startswith(f"{out}: softmax candidate ")
    m = load(out)
    assert dict(m.SPEC.defines)["BLOCK"] == 512 and "#define UNROLL_BY 8\n" in m.SPEC.source
    assert m.launch_plan(rows=5, cols=9) == [("softmax_template", (5,), (512,), 0)]
    about = " ".join(m.__doc__.split())  # wrapped at 100 columns, where the run's path ends
    assert "100.0 us at rows=8192,cols=8192" in about and "NVIDIA H200" in about
    assert "    import softmax\n" in m.__doc__


def test_a_hyphenated_run_path_stays_whole_in_the_modules_docstring(tmp_path):
    run = make_run(tmp_path / "a-long-folder-name-with-hyphens-where-a-line-could-break" / "and-another-one-of-them")
    assert cli.main(["export", str(run), "softmax"]) == 0
    doc = load(run / "best" / "softmax.py").__doc__
    assert str(run) in doc  # the path can be copied from the module as it stands


def test_out_names_the_module_and_its_usage(tmp_path, capsys):
    run = make_run(tmp_path, "gemm_bf16", "template")
    target = tmp_path / "gemm_kernel.py"
    assert cli.main(["export", str(run), "gemm_bf16", "--out", str(target)]) == 0
    m = load(target)
    assert "C = gemm_kernel.run(A, B)" in m.__doc__
    assert m.launch_plan(M=100, N=100, K=100)[0][0] == "gemm_bf16_template"


def bad(capsys, *argv: str) -> str:
    assert cli.main(["export", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fsr: error: ") and "Traceback" not in err
    return err


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    run = make_run(tmp_path)
    assert "no such directory" in bad(capsys, str(tmp_path / "nope"), "softmax")
    assert "no best/ folder" in bad(capsys, str(tmp_path), "softmax")
    assert "unknown task 'no_such_task'" in bad(capsys, str(run), "no_such_task")
    assert "no best kernel of sgemm (best/ holds kernels of: softmax)" in bad(capsys, str(run), "sgemm")
    assert "is a directory" in bad(capsys, str(run), "softmax", "--out", str(tmp_path))
    assert "cannot write" in bad(capsys, str(run), "softmax", "--out", str(tmp_path / "missing" / "m.py"))
    best = run / "best" / "softmax.cu"
    best.write_text(best.read_text().replace("expf(", "__expf("))  # edited since the run wrote it
    assert "no evaluation with verdict OK" in bad(capsys, str(run), "softmax")
    best.write_text("/* fsr\n[[launch]]\n*/\n")
    assert "is missing" in bad(capsys, str(run), "softmax")


def test_a_kernel_whose_evaluation_was_not_ok_is_refused(tmp_path, capsys):
    run = make_run(tmp_path, verdict=Verdict.WRONG)
    assert not (run / "best" / "softmax.cu").exists()  # fsr run writes best/ from OK evaluations only
    task = tasks.load("softmax")
    (run / "best" / "softmax.cu").write_text(cfmt.export(cfmt.parse(task.template_source, task)))
    assert "no evaluation with verdict OK" in bad(capsys, str(run), "softmax")
    make_run(tmp_path / "other", "softmax", "baseline")  # an OK evaluation, but of another kernel
    other = tmp_path / "other" / "runs" / "r1"
    (other / "best" / "softmax.cu").write_text((run / "best" / "softmax.cu").read_text())
    assert "no evaluation with verdict OK" in bad(capsys, str(other), "softmax")


def test_the_command_list_names_export(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "export" in capsys.readouterr().out
