"""Bad input at the command line: one line on stderr, exit code 2, nothing left behind; and the
README's exit-code table says what the commands do."""

from __future__ import annotations

import re
import shutil

import pytest

from fsr import cli, commands, run_json
from tests.support.cli import BASELINE, ROOT, SOFTMAX, assert_one_line, fsr, run_main


@pytest.mark.parametrize(("args", "said"), [
    (("run", "softmax", "--max-evaluations", "-5"), ["--max-evaluations", "an integer >= 1", "'-5'"]),
    (("run", "softmax", "--max-evaluations", "many"), ["--max-evaluations", "'many'"]),
    (("run", "softmax", "--model", "m", "--base-url", "notaurl"), ["--base-url", "http://", "'notaurl'"]),
    (("run", "softmax", "--timeout", "0"), ["--timeout", "a number > 0"]),
    (("run", "softmax", "--gpus", "0"), ["--gpus"]),
    (("run", "softmax", "--strategy", "magic"), ["--strategy"]),
    (("eval", "softmax", BASELINE, "--repeat", "0"), ["--repeat"]),
    (("eval", "softmax", BASELINE, "--arch", "90"), ["--arch", "sm_90"]),
    (("eval", "softmax", BASELINE, "--tune-trials", "-1"), ["--tune-trials"]),
    (("nonsense",), ["invalid choice"]),
])
def test_bad_numbers_urls_and_options_are_one_line(capsys, args, said):
    assert_one_line(*run_main(capsys, *args), *said)


def test_a_bad_config_value_names_section_field_value_and_what_is_allowed(capsys, tmp_path):
    path = tmp_path / "fsr.toml"
    path.write_text('[eval]\ntimeout_s = "abc"\n')
    for args in (("run", "softmax", "--runs-dir", str(tmp_path / "runs")), ("eval", "softmax", BASELINE)):
        assert_one_line(*run_main(capsys, "--config", str(path), *args), '[eval] timeout_s = "abc"', "> 0")
    assert not (tmp_path / "runs").exists()


def test_a_directory_as_config_is_one_line(capsys, tmp_path):
    assert_one_line(*run_main(capsys, "--config", str(tmp_path), "eval", "softmax", BASELINE), "directory")


def test_an_unknown_task_among_good_ones_is_one_line_and_no_run_directory(capsys, tmp_path):
    runs = tmp_path / "runs"
    assert_one_line(*run_main(capsys, "run", "softmax", "nope", "sgemm", "--runs-dir", str(runs)), "'nope'")
    assert not runs.exists()


def test_a_tasks_dir_that_does_not_exist_is_one_line(capsys, tmp_path):
    for args in (("tasks",), ("eval", "softmax", BASELINE), ("run", "softmax")):
        assert_one_line(*run_main(capsys, "--tasks-dir", str(tmp_path / "none"), *args), "does not exist")


def test_a_broken_task_is_named_with_file_and_line_and_fsr_tasks_lists_the_others(capsys, tmp_path):
    shutil.copytree(SOFTMAX, tmp_path / "good")
    shutil.copytree(SOFTMAX, tmp_path / "broken")
    (tmp_path / "broken" / "reference.py").write_text("import numpy as np\n\ndef make_inputs(sizes, rng)\n")
    assert_one_line(*run_main(capsys, "--tasks-dir", str(tmp_path), "eval", "broken", BASELINE), "reference.py:3")
    code = cli.main(["--tasks-dir", str(tmp_path), "tasks"])
    out = capsys.readouterr()
    assert code == commands.EXIT_USAGE and "good" in out.out and "broken" not in out.out
    assert_one_line(code, out.err, "broken", "reference.py:3")


@pytest.mark.parametrize(("content", "said"), [
    (None, "is a directory"), (b"", "is empty"), (b"\xff\xfe\x00\x01", "not a text file"),
    (b"def f():\n    pass\n", "no '/* fsr ... */' header"),
])
def test_eval_of_a_file_that_is_no_candidate_is_one_line(capsys, tmp_path, content, said):
    path = tmp_path / "k.py"
    path.mkdir() if content is None else path.write_bytes(content)
    assert_one_line(*run_main(capsys, "eval", "softmax", str(path)), said)


def test_eval_lineage_that_is_a_file_is_one_line(capsys, tmp_path):
    (tmp_path / "f").write_text("")
    assert_one_line(*run_main(capsys, "eval", "softmax", BASELINE, "--lineage", str(tmp_path / "f")), "--lineage")


@pytest.mark.parametrize("text", ["{not json", "[]", ""])
def test_resume_with_a_damaged_run_json_is_one_line(capsys, tmp_path, text):
    (tmp_path / "run.json").write_text(text)
    assert_one_line(*run_main(capsys, "run", "--resume", str(tmp_path)), "run.json is damaged")


def test_resume_with_a_run_json_whose_config_is_bad_is_one_line(capsys, tmp_path):
    (tmp_path / "run.json").write_text('{"config": {"search": {"islands": 0}}, "tasks": ["softmax"]}')
    assert_one_line(*run_main(capsys, "run", "--resume", str(tmp_path)), "run.json", "[search] islands = 0")


def test_a_run_without_an_api_key_leaves_no_run_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    runs = tmp_path / "runs"
    assert_one_line(*run_main(capsys, "run", "softmax", "--model", "gpt-4.1", "--runs-dir", str(runs)), "API key")
    assert not runs.exists()


def test_a_run_without_a_gpu_exits_3_and_leaves_no_run_directory(tmp_path):
    runs = tmp_path / "runs"
    out = fsr("run", "softmax", "--local", "--max-evaluations", "1", "--runs-dir", str(runs),
              env={"CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == commands.EXIT_NO_DEVICE, out.stderr
    assert "Traceback" not in out.stderr and not runs.exists()


def readme_exit_codes() -> dict[int, str]:
    text = (ROOT / "README.md").read_text()
    table = text[text.index("Exit codes (every command):"):].split("\n\n")[1]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| (.*) \|$", table, re.M)}


def test_the_readme_exit_code_table_matches_the_commands(tmp_path):
    table = readme_exit_codes()
    assert set(table) == {commands.EXIT_OK, commands.EXIT_VERDICT, commands.EXIT_USAGE, commands.EXIT_NO_DEVICE,
                          commands.EXIT_INTERRUPTED}
    assert fsr("tasks").returncode == commands.EXIT_OK and "listed" in table[commands.EXIT_OK]
    rejected = fsr("eval", "softmax", "tests/adversarial/softmax/timer.cu")
    assert rejected.returncode == commands.EXIT_VERDICT and "verdict other than OK" in table[commands.EXIT_VERDICT]
    bad = fsr("eval", "softmax", str(tmp_path / "missing.cu"))
    assert bad.returncode == commands.EXIT_USAGE and bad.stderr.count("\n") == 1
    assert "one line on stderr" in table[commands.EXIT_USAGE]
    no_gpu = fsr("eval", "softmax", BASELINE, env={"CUDA_VISIBLE_DEVICES": ""})
    assert no_gpu.returncode == commands.EXIT_NO_DEVICE and "no CUDA device" in table[commands.EXIT_NO_DEVICE]


def test_runs_dir_where_no_run_directory_can_be_made_is_one_line(capsys, tmp_path):
    (tmp_path / "afile").write_text("")
    for runs in (tmp_path / "afile", tmp_path / "afile" / "runs"):
        assert_one_line(*run_main(capsys, "run", "softmax", "--runs-dir", str(runs)), "--runs-dir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # the probe left nothing


def test_resume_keeps_the_recorded_config_and_applies_options_but_refuses_a_config_file(capsys, tmp_path):
    from dataclasses import replace

    from fsr import config
    from fsr.commands import run

    recorded = config.Config(search=replace(config.SearchConfig(), islands=2, max_evaluations=10))
    run_json.write_run_json(tmp_path, config.to_dict(recorded), {"tasks": ["softmax"]})
    args = cli.build_parser().parse_args(["run", "--resume", str(tmp_path), "--max-evaluations", "30"])
    run_dir, cfg, task_list = run._setup(args)
    assert (cfg.search.islands, cfg.search.max_evaluations) == (2, 30) and [t.name for t in task_list] == ["softmax"]
    (tmp_path / "other.toml").write_text("[search]\nislands = 3\n")
    assert_one_line(*run_main(capsys, "--config", str(tmp_path / "other.toml"), "run", "--resume", str(tmp_path)),
                    "--config with --resume")


def test_an_endpoint_that_cannot_be_reached_is_one_line_and_no_run_directory(capsys, tmp_path):
    import socket

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    runs = tmp_path / "runs"
    code, err = run_main(capsys, "run", "softmax", "--model", "m", "--base-url", f"http://127.0.0.1:{port}/v1",
                         "--runs-dir", str(runs))
    assert_one_line(code, err, "cannot reach", f"127.0.0.1:{port}")
    assert not runs.exists()


def test_the_endpoint_check_passes_a_server_without_a_model_list():
    from fsr.commands.run import _check_endpoint
    from fsr.config import LLMConfig
    from fsr.testing.llm_server import ScriptedServer

    with ScriptedServer() as server:
        _check_endpoint(LLMConfig(model="scripted-model", base_url=server.base_url))  # GET /models: 501
