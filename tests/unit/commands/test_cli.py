"""`fsr` command-line behaviour that needs no GPU: bad input is one line and exit code 2."""

import subprocess
import sys

import pytest

from tests.support.paths import ROOT


def fsr(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fsr", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_tasks_lists_builtin_tasks():
    out = fsr("tasks")
    assert out.returncode == 0 and "softmax" in out.stdout


def test_a_reader_that_stops_early_is_no_error():
    """`fsr tasks | head -1`: the pipe closes before fsr has written; no traceback, exit 0."""
    proc = subprocess.Popen([sys.executable, "-m", "fsr", "tasks"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before fsr writes anything
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_long_task_names_sit_on_their_own_line(tmp_path):
    import shutil

    long_name = "kb1_63_conv_standard_2d__square_input__square_kernel_and_more"
    shutil.copytree(ROOT / "tasks" / "gelu", tmp_path / long_name)
    shutil.copytree(ROOT / "tasks" / "gelu", tmp_path / "gelu")
    out = fsr("--tasks-dir", str(tmp_path), "tasks")
    assert out.returncode == 0, out
    lines = out.stdout.splitlines()
    assert lines[0].startswith("gelu ") and lines[0].index("GELU") < 40  # short names keep a narrow column
    assert long_name in lines and max(len(line) for line in lines) <= 100
    assert all(len(line.split()) > 1 for line in lines[lines.index(long_name) + 1:][:1])  # the text is not one letter a line


def test_unknown_task_missing_file_and_bad_header_exit_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text("/* fsr\n[[launch]]\nkernel = 'k'\n*/\n")
    for args in (("eval", "nope", "x.cu"), ("eval", "softmax", str(tmp_path / "missing.cu")),
                 ("eval", "softmax", str(bad))):
        out = fsr(*args)
        assert out.returncode == 2, out
        assert out.stderr.count("\n") == 1 and out.stderr.startswith("fsr: error:"), out.stderr
        assert "Traceback" not in out.stderr


def test_rejected_kernel_exits_1_with_reason():
    out = fsr("eval", "softmax", "tests/adversarial/softmax/timer.cu")
    assert out.returncode == 1 and "REJECTED" in out.stdout and "timer" in out.stdout


def test_eval_json_on_this_machine():
    """Without a GPU: compiles, reports resources, exit 3; with one: a full evaluation."""
    out = fsr("eval", "softmax", "tasks/softmax/baseline.cu", "--json")
    assert out.returncode in (0, 3), out.stderr
    assert '"candidate_id"' in out.stdout
    if out.returncode == 3:
        assert "registers" in out.stdout and "CUDA device" in out.stdout


def test_run_summary_has_a_line_per_worker_and_names_faults_only_when_there_were_some():
    from fsr.commands.run import _worker_lines
    from fsr.execute.base import WorkerStats

    def stats(name, evaluations, busy_s, alive_s, crashes=0, timeouts=0, restarts=0, lost=0, requeued=0, setup_s=0.0):
        return WorkerStats(name, "ready", "NVIDIA H200", 0, evaluations, crashes, timeouts, restarts, busy_s,
                           alive_s, lost, requeued, setup_s)

    first, second, third = _worker_lines([stats("w00@10.0.0.1/gpu0", 49, 99.0, 100.0, setup_s=6.0),
                                          stats("w01@10.0.0.1/gpu1", 3, 0.0, 0.0, crashes=1, restarts=1),
                                          stats("w02@10.0.0.2/gpu0", 7, 5.0, 10.0, lost=1, requeued=2)])
    # preparing (child start, task preparation) is told apart from evaluating candidates
    assert first == ("  worker w00@10.0.0.1/gpu0 (NVIDIA H200): 49 evaluations, evaluating 93%, preparing 6%, "
                     "idle 1% of 100 s")
    assert second.endswith("3 evaluations, never ready, 1 crashed, 0 timed out, 1 restarts")
    assert third.endswith("7 evaluations, evaluating 50%, preparing 0%, idle 50% of 10 s, lost 1 time "
                          "(2 evaluations re-queued)")
    assert _worker_lines([]) == []  # an executor without workers to report adds nothing


def test_resuming_a_directory_that_is_not_an_fsr_run_says_so_in_one_line(tmp_path):
    foreign = tmp_path / "other_tool"
    foreign.mkdir()
    (foreign / "run.json").write_text('{"name": "another tool", "config": {}}')
    for target, why in ((foreign, "not an fsr run directory (its run.json names no tasks)"),
                        (tmp_path, "not an fsr run directory (no run.json)"),
                        (tmp_path / "missing", "no such directory")):
        out = fsr("run", "--resume", str(target))
        assert out.returncode == 2, out
        assert out.stderr.count("\n") == 1 and out.stderr.startswith("fsr: error:"), out.stderr
        assert f"--resume {target}: {why}" in out.stderr, out.stderr


def test_import_writes_tasks_skips_a_hanging_file_in_one_line_and_counts(tmp_path):
    import pytest

    pytest.importorskip("torch")
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "1_relu.py").write_text((ROOT / "tests/data/kernelbench/level1/19_ReLU.py").read_text())
    (problems / "2_hangs.py").write_text("import torch\nN = 64\nclass Model(torch.nn.Module):\n"
                                         "    def forward(self, x):\n        while True:\n            pass\n"
                                         "def get_inputs():\n    return [torch.rand(N)]\n"
                                         "def get_init_inputs():\n    return []\n")
    out = fsr("import", str(problems), "--out", str(tmp_path / "tasks"), "--timeout", "20")
    assert out.returncode == 1, out  # a file was skipped
    lines = out.stdout.splitlines()
    assert lines[0].startswith("imported 1_relu: 6 test sizes")
    assert lines[1] == f"skipped {problems / '2_hangs.py'}: took longer than 20 s"
    assert lines[-1].startswith("imported 1, skipped 1")
    listed = fsr("--tasks-dir", str(tmp_path / "tasks"), "tasks")
    assert listed.returncode == 0 and "1_relu" in listed.stdout, listed
    missing = fsr("import", str(tmp_path / "nothing.py"))
    assert missing.returncode == 2 and missing.stderr.startswith("fsr: error:") and missing.stderr.count("\n") == 1


def test_a_task_without_a_baseline_is_left_out_in_one_line_and_alone_is_bad_input(tmp_path, capsys):
    import shutil

    from fsr import tasks
    from fsr.commands import UsageError
    from fsr.commands.run import startable
    from fsr.propose.mutate import MutateProposer

    folder = tmp_path / "tasks"
    shutil.copytree(ROOT / "tasks" / "gelu", folder / "gelu")
    (folder / "gelu" / "baseline.cu").unlink()
    (folder / "gelu" / "template.cu").unlink()
    out = fsr("--tasks-dir", str(folder), "run", "gelu", "--local", "--runs-dir", str(tmp_path / "runs"))
    assert out.returncode == 2, out
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("fsr: error: gelu: no baseline.cu"), out.stderr
    assert not (tmp_path / "runs").exists()
    # fsr eval needs no baseline: the kernel is compiled and would be checked and timed (speedups
    # over PyTorch eager); without a GPU here, that is exit 3 after compiling
    kernel = fsr("--tasks-dir", str(folder), "eval", "gelu", str(ROOT / "tasks" / "gelu" / "baseline.cu"))
    assert kernel.returncode == 3 and "baseline" not in kernel.stderr, kernel
    assert "need a CUDA device" in kernel.stderr, kernel.stderr
    imported, softmax = tasks.load("gelu", folder), tasks.load("softmax")
    assert startable([imported, softmax], MutateProposer()) == [softmax]
    assert capsys.readouterr().err == ("fsr: gelu: no baseline.cu and no model: the offline proposer needs a kernel "
                                       "to start from; configure a model (docs/models.md) or add baseline.cu; left "
                                       "out, the other tasks go on\n")
    with pytest.raises(UsageError):
        startable([imported], MutateProposer())
