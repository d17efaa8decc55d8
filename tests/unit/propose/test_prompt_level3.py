"""`fsr prompt` of KernelBench's largest level-3 networks (tests/data/kernelbench/level3:
DenseNet-121 and -201, MobileNetV2, EfficientNet-B0, the prompts that were furthest over the
budget), imported as a user imports them, is within the prompt budget with or without a GPU
paragraph; where the full list of arguments does not fit, the footer says what was cut. Imports
take minutes: the four are imported once, two at a time; the DenseNets, the longest prompts, must
import. ResNet-101 is left out: `fsr import` skips it (a half-precision forward passes the
tolerance its float32 forward needs), after a minute of forwards on a CI machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fsr import tasks
from fsr.cli import main
from fsr.config import LLMConfig
from fsr.kernelbench.write import task_name
from fsr.propose.base import ProposalRequest
from fsr.propose.prompt import build
from fsr.types import DeviceInfo
from tests.support.paths import DATA

LARGEST = ("15_DenseNet121.py", "16_DenseNet201.py", "20_MobileNetV2.py", "22_EfficientNetB0.py")
NAMES = [task_name(Path("level3") / f) for f in LARGEST]
BUDGET = LLMConfig().prompt_budget_tokens
H200 = DeviceInfo("NVIDIA H200", "sm_90", 132, 49152, 232448, 233472, 60 * 2**20, 65536, copy_gbps=4140.0,
                  sgemm_tflops=50.6, tensor_tflops=317.0, read_gbps=4310.0, half_tflops=702.0)


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    level3 = DATA / "kernelbench" / "level3"
    out = tmp_path_factory.mktemp("tasks")
    code = main(["import", *(str(level3 / f) for f in LARGEST), "--out", str(out), "--jobs", "2", "--timeout", "1800"])
    assert code in (0, 1)  # 1: some file skipped, each with its reason (the importer's business)
    assert (out / "kb3_15_densenet121").is_dir() and (out / "kb3_16_densenet201").is_dir()
    return out


def written(imported: Path, name: str) -> None:
    if not (imported / name).is_dir():
        pytest.skip(f"fsr import did not write {name} (its line in the import's output says why)")


@pytest.mark.parametrize("name", NAMES)
def test_fsr_prompt_of_a_large_network_is_within_the_budget(imported: Path, name: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    written(imported, name)
    assert main(["--tasks-dir", str(imported), "prompt", name]) == 0
    out = capsys.readouterr().out
    footer = out.strip().splitlines()[-1]
    tokens = int(re.match(r"===== (\d+) tokens by fsr's estimate", footer).group(1))  # type: ignore[union-attr]
    assert tokens <= BUDGET, footer
    task = tasks.load(name, imported)
    if "shortened to fit: nothing" in footer:  # the whole list: every argument once
        assert all(out.count(f"- `{a.name}`: ") == 1 for a in task.args)
    else:
        assert "shortened to fit: task: the module's weights and buffers grouped by role" in footer
    with_gpu = build(ProposalRequest(task, ()), H200, budget_tokens=BUDGET)
    assert with_gpu.tokens <= BUDGET and "# The GPU" in with_gpu.messages[1][1]
    print(f"{name}: {tokens} tokens without a GPU paragraph, {with_gpu.tokens} with; cut: {with_gpu.cuts or 'nothing'}")


def test_under_a_small_budget_each_network_is_summarised_to_fit(imported: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """With a quarter of the budget (a model of small context) every one of them still fits: its
    weights and buffers are summarised, and the footer says so."""
    config = tmp_path / "fsr.toml"
    config.write_text(f"[llm]\nprompt_budget_tokens = {BUDGET // 4}\n")
    for name in (n for n in NAMES if (imported / n).is_dir()):
        assert main(["--config", str(config), "--tasks-dir", str(imported), "prompt", name]) == 0
        footer = capsys.readouterr().out.strip().splitlines()[-1]
        assert int(footer.split()[1]) <= BUDGET // 4, footer
        assert "shortened to fit: task: the module's weights and buffers grouped by role" in footer, footer
