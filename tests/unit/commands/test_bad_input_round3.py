"""Bad input a newcomer met (round three), none of which needs torch: every file a user names is
read through one gate (a device, a FIFO or a huge file is one line, never a hang or a read without
end), one wording per fault, an empty tasks folder and empty names refused, an endpoint's model
list checked, `fsr import`'s named paths and --out checked before anything is written, and the
README and docs saying what the commands do."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fsr import cli, commands, config, tasks
from tests.support.paths import DATA, ROOT

RELU = DATA / "kernelbench" / "level1" / "19_ReLU.py"


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    """fsr in this process: exit code, stdout and stderr."""
    try:
        code = cli.main(list(args))
    except SystemExit as e:  # argparse
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(code: int, err: str, *said: str) -> None:
    assert code == commands.EXIT_USAGE, err
    assert err.count("\n") == 1 and err.startswith("fsr: error:") and "Traceback" not in err, err
    for s in said:
        assert s in err, err


def _bounded() -> None:  # a child that would read /dev/zero whole stops at 4 GiB instead of filling memory
    resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))


def fsr_bounded(*args: str) -> subprocess.CompletedProcess:
    """`fsr ARGS` in a child bounded in memory and time (a FIFO read would block, /dev/zero grow)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "fsr", *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=60, preexec_fn=_bounded)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.toml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("args", [
    ("--config", "/dev/zero", "tasks"),
    ("prompt", "softmax", "--parent", "/dev/zero"),
    ("eval", "softmax", "/dev/zero"),
])
def test_a_device_as_an_input_file_is_one_line(args):
    out = fsr_bounded(*args)
    one_line(out.returncode, out.stderr, "/dev/zero: is a character device, not a regular file")


def test_a_fifo_as_config_or_parent_is_one_line_not_a_hang(fifo):
    for args in (("--config", str(fifo), "tasks"), ("prompt", "softmax", "--parent", str(fifo))):
        out = fsr_bounded(*args)
        one_line(out.returncode, out.stderr, f"{fifo}: is a named pipe (FIFO), not a regular file")


def test_a_file_past_the_bound_is_refused_before_it_is_read(capsys, tmp_path):
    from fsr.files import MAX_INPUT_BYTES

    big = tmp_path / "big.cu"
    with open(big, "wb") as f:
        f.truncate(MAX_INPUT_BYTES + 1)  # sparse: no disk used
    code, _, err = run_main(capsys, "eval", "softmax", str(big))
    one_line(code, err, f"{big}: larger than 16 MiB")
    code, _, err = run_main(capsys, "--config", str(big), "tasks")
    one_line(code, err, f"config {big}: larger than 16 MiB")


def test_the_gate_reads_a_regular_text_file_and_names_each_fault_once(tmp_path):
    from fsr.files import InputFileError, read_input

    good = tmp_path / "k.cu"
    good.write_text("// a kernel\n")
    assert read_input(good) == "// a kernel\n"
    binary = tmp_path / "b.cu"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    for path, what, said in ((tmp_path / "none.cu", "--parent", f"--parent {tmp_path / 'none.cu'}: no such file"),
                             (tmp_path, "", f"{tmp_path}: is a directory, not a file"),
                             (binary, "config", f"config {binary}: not a text file (not UTF-8)")):
        with pytest.raises(InputFileError) as e:
            read_input(path, what)
        assert str(e.value) == said


@pytest.mark.parametrize("args, said", [
    (("--config", "{missing}", "tasks"), "config {missing}: no such file"),
    (("prompt", "softmax", "--parent", "{missing}"), "--parent {missing}: no such file"),
    (("eval", "softmax", "{missing}"), "fsr: error: {missing}: no such file"),
    (("launch", "softmax", "{missing}"), "fsr: error: {missing}: no such file"),
    (("explore", "softmax", "--configs", "{missing}"), "--configs {missing}: no such file"),
])
def test_a_missing_file_is_said_in_one_wording_whichever_option_names_it(capsys, tmp_path, args, said):
    missing = str(tmp_path / "missing.cu")
    code, _, err = run_main(capsys, *(a.format(missing=missing) for a in args))
    one_line(code, err, said.format(missing=missing))
    assert "Errno" not in err


def test_a_missing_config_file_is_a_config_error_in_python_too(tmp_path):
    with pytest.raises(config.ConfigError, match=r"config .*missing\.toml: no such file$"):
        config.load(tmp_path / "missing.toml")


def test_an_empty_tasks_folder_is_said_and_exits_2(capsys, tmp_path):
    code, out, err = run_main(capsys, "--tasks-dir", str(tmp_path), "tasks")
    one_line(code, err, f"no tasks in {tmp_path}")
    assert out == ""


@pytest.mark.parametrize("args, option", [
    (("run", "softmax", "--model", ""), "--model"),
    (("run", "softmax", "--runs-dir", ""), "--runs-dir"),
    (("bench", "--runs-dir", " "), "--runs-dir"),
    (("prompt", "softmax", "--parent", ""), "--parent"),
    (("import", str(RELU), "--out", ""), "--out"),
])
def test_empty_names_are_refused(capsys, tmp_path, monkeypatch, args, option):
    monkeypatch.chdir(tmp_path)  # an empty --runs-dir would have meant here
    code, out, err = run_main(capsys, *args)
    one_line(code, err, option, "not an empty string")
    assert list(tmp_path.iterdir()) == []


def test_an_endpoint_whose_model_list_lacks_the_model_is_one_line_naming_both(capsys, tmp_path):
    from fsr.testing.llm_server import ScriptedServer

    runs = tmp_path / "runs"
    with ScriptedServer(models=["qwen-coder", "llama3:latest"]) as server:
        code, _, err = run_main(capsys, "run", "softmax", "--model", "qwen-coda", "--base-url", server.base_url,
                                "--runs-dir", str(runs))
        one_line(code, err, "does not serve 'qwen-coda'", "qwen-coder", "llama3:latest")
        assert not runs.exists() and server.bodies == []  # no chat request was sent


def test_the_endpoint_check_passes_a_listed_model_and_ollamas_latest_tag():
    from fsr.commands.run import _check_endpoint
    from fsr.config import LLMConfig
    from fsr.testing.llm_server import ScriptedServer

    with ScriptedServer(models=["qwen-coder", "llama3:latest"]) as server:
        for model in ("qwen-coder", "llama3", "llama3:latest"):
            _check_endpoint(LLMConfig(model=model, base_url=server.base_url))
        with pytest.raises(commands.UsageError, match="does not serve 'gpt-x'"):
            _check_endpoint(LLMConfig(models="qwen-coder=1, gpt-x=2", base_url=server.base_url))  # an ensemble's too


def test_import_without_out_refuses_even_in_a_checkout(capsys, tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("")  # the clone's tasks/ is no place for imported tasks
    monkeypatch.setattr(tasks, "DEFAULT_TASKS_DIR", tmp_path / "tasks")
    code, _, err = run_main(capsys, "import", str(RELU))
    one_line(code, err, "pass --out DIR")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pyproject.toml"]


@pytest.mark.parametrize("path, said", [("/dev/zero", "/dev/zero: is a character device, not a regular file"),
                                        ("{tmp}/none.py", "{tmp}/none.py: no such file or folder")])
def test_import_of_a_path_that_is_no_file_says_what_it_is(capsys, tmp_path, path, said):
    code, _, err = run_main(capsys, "import", path.format(tmp=tmp_path), "--out", str(tmp_path / "kb"))
    one_line(code, err, said.format(tmp=tmp_path))
    assert not (tmp_path / "kb").exists()


def test_import_checks_out_without_creating_it(tmp_path):
    import argparse

    from fsr.commands.importer import output_dir

    out = tmp_path / "a" / "b"
    assert output_dir(argparse.Namespace(out=str(out), tasks_dir=None)) == out
    assert not (tmp_path / "a").exists()
    (tmp_path / "f").write_text("")
    with pytest.raises(commands.UsageError, match="cannot create --out .*f is a file"):
        output_dir(argparse.Namespace(out=str(tmp_path / "f" / "sub"), tasks_dir=None))


def test_a_binary_problem_file_is_not_a_text_file(tmp_path):
    from fsr.kernelbench import one

    path = tmp_path / "blob.py"
    path.write_bytes(b"\x80\x81\x82 N = 4\n")
    result = one.import_one(path, tmp_path / "kb")
    assert result == {"name": "blob", "ok": False, "reason": "not a text file (not UTF-8)"}
    assert not (tmp_path / "kb").exists()


def readme_exit_codes() -> dict[int, str]:
    text = (ROOT / "README.md").read_text()
    table = text[text.index("Exit codes (every command):"):].split("\n\n")[1]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| (.*) \|$", table, re.M)}


def test_the_exit_code_table_names_imports_and_launchs_exit_1_and_imports_2():
    table = readme_exit_codes()
    assert "`fsr import`" in table[commands.EXIT_VERDICT] and "`fsr launch`" in table[commands.EXIT_VERDICT]
    assert "`fsr import`" in table[commands.EXIT_USAGE]
    import_doc = (ROOT / "docs" / "import.md").read_text()
    assert "1 when some were skipped" in import_doc and "2 when none was" in import_doc


def test_every_llm_key_is_in_the_documented_llm_section():
    from dataclasses import fields

    text = (ROOT / "docs" / "models.md").read_text()
    block = text[text.index("## The `[llm]` config section"):].split("```toml\n", 1)[1].split("```", 1)[0]
    documented = tomllib.loads(block)["llm"]
    assert set(documented) == {f.name for f in fields(config.LLMConfig)}
    defaults = config.LLMConfig()
    assert all(documented[k] == getattr(defaults, k) for k in documented if k != "model"), documented


def test_the_readme_tasks_sample_is_the_real_output():
    text = (ROOT / "README.md").read_text()
    sample = re.search(r"```\nfsr tasks\n```\n\n```\n(.*?)\n```", text, re.S).group(1).splitlines()
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    real = subprocess.run([sys.executable, "-m", "fsr", "tasks"], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=120).stdout.splitlines()
    pieces = "\n".join(sample).split("\n...\n")
    assert len(pieces) >= 2, sample
    joined = "\n".join(real)
    at = 0
    for piece in pieces:  # each run of lines between "..." appears in the output, in order
        found = joined.find(piece, at)
        assert found >= 0, f"{piece!r} is not in `fsr tasks`' output at 80 columns"
        at = found + len(piece)
    assert real[0] == sample[0] and real[-1] == sample[-1]
