"""`fsr tasks`: descriptions printed as written (no markup eaten, never cut mid-sentence), and bad
input (a config, a tasks folder, a task name) is one line and exit 2."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from fsr import cli, commands
from fsr.commands.tasks import summary
from tests.support.paths import ROOT

SOFTMAX = ROOT / "tasks" / "softmax"
DESCRIPTION = ("Histogram of x[i] into [b] bins: counts[b] is the number of i with x[i] == b, int32. "
               "A [bold]second[/bold] sentence that the list leaves out. And a third, with [i] in it.")


def run(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(args))
    except SystemExit as e:  # argparse
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def marked_up(tmp_path: Path) -> Path:
    """A tasks folder whose one task's description looks like rich markup and spans sentences."""
    shutil.copytree(SOFTMAX, tmp_path / "marked")
    toml = tmp_path / "marked" / "task.toml"
    text = toml.read_text()
    text = re.sub(r'description = """.*?"""', lambda _: f'description = """\n{DESCRIPTION}\n"""', text, flags=re.S)
    toml.write_text(text.replace('name = "softmax"', 'name = "marked"'))
    return tmp_path


def test_the_list_shows_brackets_as_written_and_ends_the_gist_with_an_ellipsis(capsys, marked_up):
    code, out, err = run(capsys, "--tasks-dir", str(marked_up), "tasks")
    assert code == commands.EXIT_OK, err
    flat = " ".join(out.split())
    assert "Histogram of x[i] into [b] bins ..." in flat  # the gist: up to the formula's colon
    assert "second" not in flat and "fsr tasks NAME" in flat


def test_a_named_task_is_shown_in_full_markup_and_all(capsys, marked_up):
    code, out, err = run(capsys, "--tasks-dir", str(marked_up), "tasks", "marked")
    assert code == commands.EXIT_OK, err
    assert DESCRIPTION in " ".join(out.split())  # every sentence, every bracket
    assert "in  x: float32 [rows, cols]" in out and "bench size rows=8192,cols=8192" in " ".join(out.split())


def test_the_builtin_list_names_every_task_and_cuts_no_description_mid_sentence(capsys):
    code, out, _ = run(capsys, "tasks")
    assert code == commands.EXIT_OK
    flat = " ".join(out.split())
    assert "y[i] = x[0] + x[1] + ... + x[i]" not in flat  # scan's formula is not in the gist ...
    assert "Inclusive prefix sum of an int32 vector x of length n ..." in flat  # ... but its subject is
    assert "counts[b] is the number" not in flat and "[0, bins) ..." in flat


@pytest.mark.parametrize(("text", "gist"), [
    ("One sentence, no colon.", "One sentence, no colon."),
    ("First one. Second one.", "First one. ..."),
    ("Prefix sum: y[i] = x[0] + ... + x[i]. More.", "Prefix sum ..."),
    ("Sum (a: b) of x: y = 1.", "Sum (a: b) of x ..."),  # a colon inside brackets is not the cut
    ("Uses e.g. cuBLAS.", "Uses e.g. cuBLAS."),  # "e.g. c": no capital after the full stop
])
def test_the_gist_is_cut_at_a_sentence_or_the_formula(text, gist):
    assert summary(text) == gist


@pytest.mark.parametrize(("content", "said"), [
    (None, "no such file"), ("[eval\n", "config"), ("[eval]\ntimeout_s = -1\n", "timeout_s"),
    ("[nope]\n", "unknown config section"),
])
def test_a_missing_or_malformed_config_is_one_line_and_exit_2(capsys, tmp_path, content, said):
    path = tmp_path / "fsr.toml"
    if content is not None:
        path.write_text(content)
    code, out, err = run(capsys, "--config", str(path), "tasks")
    assert code == commands.EXIT_USAGE and out == "", err
    assert err.count("\n") == 1 and err.startswith("fsr: error:") and said in err.lower(), err


def test_a_tasks_dir_that_is_a_file_says_so(capsys, tmp_path):
    path = tmp_path / "tasks.txt"
    path.write_text("")
    code, _, err = run(capsys, "--tasks-dir", str(path), "tasks")
    assert code == commands.EXIT_USAGE and err.count("\n") == 1, err
    assert "is not a directory" in err and "does not exist" not in err


def test_an_unknown_task_name_is_one_line(capsys):
    code, out, err = run(capsys, "tasks", "softmax", "nope")
    assert code == commands.EXIT_USAGE and out == "" and err.count("\n") == 1 and "unknown task 'nope'" in err


def test_names_are_in_natural_order(tmp_path):
    from fsr import tasks

    for name in ("kb1_10_b", "kb1_2_c", "kb1_1_a", "kb10_1_d", "kb2_1_e"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "task.toml").write_text("")
    assert tasks.list_tasks(tmp_path) == ["kb1_1_a", "kb1_2_c", "kb1_10_b", "kb2_1_e", "kb10_1_d"]


def test_an_unknown_name_among_many_tasks_gets_the_close_ones_not_all(capsys, tmp_path):
    for i in range(1, 100):
        (tmp_path / f"kb1_{i}_task").mkdir()
        (tmp_path / f"kb1_{i}_task" / "task.toml").write_text("")
    code, _, err = run(capsys, "--tasks-dir", str(tmp_path), "tasks", "kb1_19_tsak")
    assert code == 2 and err.count("\n") == 1 and len(err) < 300, err
    assert "did you mean kb1_19_task" in err and "lists all 99" in err and "kb1_50_task" not in err, err
    code, _, err = run(capsys, "--tasks-dir", str(tmp_path), "tasks", "zzz")
    assert code == 2 and "did you mean" not in err and len(err) < 300, err
    few = tmp_path / "few"
    for name in ("softmax", "attention", "sgemm"):
        (few / name).mkdir(parents=True)
        (few / name / "task.toml").write_text("")
    code, _, err = run(capsys, "--tasks-dir", str(few), "tasks", "softmaks")  # few tasks: all of them named
    assert code == 2 and "known: attention, sgemm, softmax)" in err, err
    code, _, err = run(capsys, "tasks", "softmaks")  # the built-in tasks, however many
    assert code == 2 and "softmax" in err and err.count("\n") == 1, err


def test_a_description_keeps_its_lines_and_joins_prose_wrapped_by_hand():
    from dataclasses import replace

    from fsr import tasks
    from fsr.commands.tasks import describe

    prose = ("A sentence that its author wrapped by hand at about ninety columns, as the built-in tasks do,\n"
             "and which goes on here.\n")
    code = "The module's source:\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
    shown = describe("t", replace(tasks.load(SOFTMAX), description=prose + code), 200)
    assert "do, and which goes on here." in shown
    assert "  The module's source:\n\n  class Model(nn.Module):\n      def forward(self, x):\n" in shown
    assert "          return torch.relu(x)\n" in shown


def test_warnings_a_task_raises_as_it_loads_are_not_printed(tmp_path):
    import os
    import subprocess
    import sys

    shutil.copytree(SOFTMAX, tmp_path / "softmax")
    with open(tmp_path / "softmax" / "reference.py", "a") as f:
        f.write("\nimport warnings\nwarnings.warn('a deprecated argument', UserWarning)\n")
    for args in (("tasks",), ("tasks", "softmax")):
        out = subprocess.run([sys.executable, "-m", "fsr", "--tasks-dir", str(tmp_path), *args], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert out.returncode == 0 and out.stderr == "" and "softmax" in out.stdout, out


def test_the_list_shows_each_tasks_dtype_and_one_task_its_tolerance(capsys):
    code, out, _ = run(capsys, "tasks")
    assert code == 0
    assert re.search(r"^softmax_bf16 .*\n(?:\s+.*\n)*?\s+bfloat16; bench rows=8192,cols=8192", out, re.M)
    assert re.search(r"^softmax .*\n(?:\s+.*\n)*?\s+float32; bench rows=8192,cols=8192", out, re.M)
    code, out, _ = run(capsys, "tasks", "softmax_bf16")
    assert code == 0 and "tolerance (bfloat16 outputs): atol 0, rtol 0.01, floor 1 x mean |ref|" in out
    code, out, _ = run(capsys, "tasks", "softmax")
    assert code == 0 and "tolerance (float32 outputs): atol 1e-07, rtol 0.0001\n" in out
