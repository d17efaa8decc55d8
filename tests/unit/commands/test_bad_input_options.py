"""Options that cannot mean what they say: an architecture NVRTC does not know, options that
contradict each other or that nothing reads, numbers past what a setting holds, empty paths,
global options after the command, a resumed run given another task, a block no GPU launches, a
task with nothing to explore, an unterminated header; `fsr --version`; and `fsr run` without a
GPU says so before starting Ray. Each is one line, and nothing is left behind."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

import fsr
from fsr import cli, run_json
from fsr.commands import EXIT_NO_DEVICE
from tests.support.cli import BASELINE, ROOT, assert_one_line, run_main


def test_version_is_printed_and_written_once(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == f"fsr {fsr.__version__}\n"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fsr.__version__"}


def test_an_architecture_nvrtc_does_not_know_is_bad_input(capsys):
    assert_one_line(*run_main(capsys, "eval", "softmax", BASELINE, "--arch", "sm_999"), "architecture sm_999", "sm_90a")
    # sm_80 has no arch-specific variant: the number alone is no longer enough
    assert_one_line(*run_main(capsys, "eval", "softmax", BASELINE, "--arch", "sm_80a"), "architecture sm_80a", "sm_80,")
    # NVRTC gives no cubin for a virtual arch (it raised past the verdicts before)
    assert_one_line(*run_main(capsys, "eval", "softmax", BASELINE, "--arch", "compute_80"), "compute_80", "sm_90a")
    from fsr.commands.eval import check_arch

    for known in ("sm_90", "sm_90a", "sm_100a", "sm_80", ""):
        check_arch(known)


@pytest.mark.parametrize("options, said", [
    (("--local", "--gpus", "2"), "it takes no --gpus"),
    (("--local", "--address", "auto"), "it takes no --address"),
    (("--depth", "3"), "--depth sets the rounds of --strategy fsr"),
    (("--max-cost", "2"), "no model is set"),
])
def test_options_that_contradict_or_that_nothing_reads_are_refused(tmp_path, capsys, options, said):
    assert_one_line(*run_main(capsys, "run", "softmax", "--runs-dir", str(tmp_path / "runs"), *options), said)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("option, value, said", [("--max-wall", "1e400", "not a finite number"),
                                                 ("--max-evaluations", str(10**26), "2**63 - 1")])
def test_a_number_past_what_a_setting_holds_says_why(capsys, option, value, said):
    assert_one_line(*run_main(capsys, "run", "softmax", option, value), said)


@pytest.mark.parametrize("option", ["--tasks-dir", "--config"])
def test_an_empty_global_path_is_refused_not_read_as_the_default(capsys, option):
    assert_one_line(*run_main(capsys, option, "", "tasks"), option, "empty")


def test_a_global_option_after_the_command_says_it_goes_before(capsys):
    assert_one_line(*run_main(capsys, "tasks", "--tasks-dir", "x"), "go before the command")
    code, err = run_main(capsys, "tasks", "--frobnicate")
    assert_one_line(code, err, "--frobnicate")
    assert "go before" not in err


def test_resuming_a_run_with_a_task_it_does_not_have_is_refused(tmp_path, capsys):
    run_json.write_run_json(tmp_path / "run", {}, {"tasks": ["softmax"]})
    assert_one_line(*run_main(capsys, "run", "sgemm", "--resume", str(tmp_path / "run")),
                    "sgemm is not a task of that run (softmax)")


def test_a_block_no_gpu_can_launch_is_refused_by_launch(capsys):
    assert_one_line(*run_main(capsys, "launch", "softmax", BASELINE, "-D", "BLOCK=100000"),
                    "holds 100000 threads", "at most 1024")


def test_explore_on_a_task_with_nothing_to_explore_says_so(tmp_path, capsys):
    shutil.copytree(ROOT / "tasks" / "gelu", tmp_path / "gelu")
    (tmp_path / "gelu" / "baseline.cu").unlink()
    (tmp_path / "gelu" / "template.cu").unlink()
    assert_one_line(*run_main(capsys, "--tasks-dir", str(tmp_path), "explore", "gelu"),
                    "gelu has no template.cu or baseline.cu")


def test_an_unterminated_header_is_called_unterminated(tmp_path, capsys):
    (tmp_path / "open.cu").write_text(Path(BASELINE).read_text().replace("*/", "", 1))
    assert_one_line(*run_main(capsys, "eval", "softmax", str(tmp_path / "open.cu")), "unterminated '/* fsr' header")
    (tmp_path / "none.cu").write_text("__global__ void k() {}\n")
    assert_one_line(*run_main(capsys, "eval", "softmax", str(tmp_path / "none.cu")), "no '/* fsr ... */' header")


def test_run_without_a_device_says_so_before_starting_ray(tmp_path, capsys, monkeypatch):
    import cluster.start
    from fsr.commands import launch

    monkeypatch.setattr(launch, "device_problem", lambda: "none is visible")
    monkeypatch.setattr(cluster.start, "connect", lambda *a, **k: pytest.fail("Ray was started"))
    code, err = run_main(capsys, "run", "softmax", "--runs-dir", str(tmp_path / "runs"), "--max-evaluations", "1")
    assert code == EXIT_NO_DEVICE and err == "fsr: a search needs a CUDA device; none is visible\n", err
    assert not (tmp_path / "runs").exists()
