"""Golden prompts: what a built-in task's and an imported task's prompt must and must not hold,
their sizes by fsr's estimate, the diagnostics in the feedback (and their switch), and `fsr
prompt` printing both messages on a machine without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsr import tasks
from fsr.candidate import parse
from fsr.cli import main
from fsr.lineage import LineageWriter
from fsr.propose.base import ProposalRequest, Scored
from fsr.propose.features import detect
from fsr.propose.prompt import build, estimate_tokens
from fsr.testing.fakes import softmax_task, timing
from fsr.testing.llm_server import FAST_KERNEL, GOOD_KERNEL
from fsr.types import DeviceInfo, Evaluation, Resources, Verdict
from tests.support.paths import DATA as TEST_DATA

DATA = TEST_DATA / "kernelbench"
SOFTMAX = DATA / "level1" / "23_Softmax.py"
RESNET = DATA / "level3" / "8_ResNetBasicBlock.py"
SYSTEM_TOKENS_BEFORE = 1226  # the system message at 18b579d, which this must not outgrow
FACTS = ("- softmax_rows (40 instructions in the code): global loads 2 x 128-bit; stores 1 x 128-bit; "
         "no tensor-core instructions; no local memory\n- Most likely limit: memory bandwidth: 88% of the copy rate")
BUILTIN = softmax_task(None)
DESCRIBED_DEVICE = DeviceInfo(name="NVIDIA H100 80GB HBM3", arch="sm_90", sm_count=132, smem_per_block=48 * 1024,
                              smem_per_block_optin=227 * 1024, smem_per_sm=228 * 1024, l2_bytes=50 * 2**20,
                              regs_per_sm=65536)  # an H100's properties, none of its ceilings


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    from fsr.kernelbench import one

    out = tmp_path_factory.mktemp("tasks")
    for path in (SOFTMAX, RESNET):
        assert one.import_one(path, out)["ok"]
    return out


def first_round(task: tasks.Task) -> tuple[str, str]:
    prompt = build(ProposalRequest(task, ()), DESCRIBED_DEVICE)
    return prompt.messages[0][1], prompt.messages[1][1]


def scored(source: str, latency_us: float, facts: str = FACTS) -> Scored:
    cand = parse(source, BUILTIN)
    ev = Evaluation(cand.id, BUILTIN.name, Verdict.OK, timing=timing(latency_us), baseline_us=4650.0,
                    torch_us=310.0, torch_compile_us=240.0, resources=Resources(registers=30), diagnostics=facts)
    return Scored(cand, ev, detect(cand))


def test_a_built_in_task_shows_its_numpy_reference_and_no_module() -> None:
    system, user = first_round(BUILTIN)
    assert "The reference (NumPy, computed in float64)" in user and "def reference(inputs, sizes)" in user
    assert "def library" not in user and "module's source" not in user and "Written by `fsr import`" not in user
    assert estimate_tokens(system) <= SYSTEM_TOKENS_BEFORE


def test_the_imported_softmax_holds_its_module_once_and_none_of_the_runtime(imported: Path) -> None:
    from fsr.kernelbench import runtime, write

    task = tasks.load(imported / "kb1_23_softmax")
    system, user = first_round(task)
    assert user.count("return torch.softmax(x, dim=1)") == 1 and user.count("class Model(nn.Module)") == 1
    for line in ("torch_lock", "def reference64", "_LAYOUT", "_SOURCE", write.MARKER, "characters cut",
                 runtime.__doc__.splitlines()[0]):
        assert line not in user, line
    assert "`x`: float32[batch_size, dim], input (read-only)" in user and "batch_size=513,dim=769" in user
    assert "timed at batch_size=4096,dim=98304" in user and "Tolerance: |got - expected| <=" in user
    assert estimate_tokens(user) <= 1000 and estimate_tokens(system) <= SYSTEM_TOKENS_BEFORE


def test_a_level3_network_keeps_its_whole_module_within_the_budget(imported: Path) -> None:
    task = tasks.load(imported / "kb3_8_resnetbasicblock")
    prompt = build(ProposalRequest(task, ()), DESCRIBED_DEVICE, budget_tokens=16_000)
    user = prompt.messages[1][1]
    assert RESNET.read_text().rstrip() in user and "characters cut" not in user
    assert prompt.tokens <= 16_000 and not prompt.shortened


def test_a_bfloat16_tasks_first_prompt_names_wgmma_on_an_sm_90_device_only() -> None:
    """On the H100 `fsr prompt` describes, the tensor-core line holds wgmma and its operand forms
    (fsr compiles for sm_90a there); on an sm_89 or sm_80 device it does not, and a float32 task's
    prompt names no tensor-core instruction."""
    from dataclasses import replace

    gemm = tasks.load("gemm_bf16")  # its description names wgmma too: only the device's line is read

    def line(device: DeviceInfo) -> str:
        user = build(ProposalRequest(gemm, ()), device).messages[1][1]
        return next(t for t in user.splitlines() if "Tensor-core instructions this arch compiles" in t)

    assert ("wgmma.mma_async.sync.aligned.m64nNk16 (N 8 to 256 by 8, one warpgroup of 128 threads; A from "
            "registers or a shared-memory matrix descriptor, B from a descriptor; bf16/f16 in, f32 accumulate; "
            "m64nNk32 for e4m3/e5m2)") in line(DESCRIBED_DEVICE) and "m16n8k16" in line(DESCRIBED_DEVICE)
    for arch in ("sm_89", "sm_80"):
        other = line(replace(DESCRIBED_DEVICE, arch=arch))
        assert "wgmma" not in other and "mma.sync.aligned.m16n8k16" in other, arch
    assert "wgmma" not in first_round(BUILTIN)[1] and "mma.sync" not in first_round(BUILTIN)[1]


def test_eager_and_torch_compile_times_come_once_an_evaluation_carries_them() -> None:
    parent = scored(GOOD_KERNEL, 500.0)
    user = build(ProposalRequest(BUILTIN, (parent,)), DESCRIBED_DEVICE).messages[1][1]
    assert "timed at rows=8192,cols=8192. There, PyTorch eager takes 310 us and torch.compile 240 us." in user
    assert "PyTorch eager takes" not in first_round(BUILTIN)[1]


def test_diagnostics_reach_the_parent_the_fastest_and_the_slower_one_and_the_switch_removes_them() -> None:
    parent = scored(BUILTIN.baseline_source, 4650.0, FACTS.replace("softmax_rows", "softmax_baseline"))
    best, slow = scored(FAST_KERNEL, 150.0, FACTS.replace("softmax_rows", "softmax_fast")), scored(GOOD_KERNEL, 200.0)
    request = ProposalRequest(BUILTIN, (parent,), best=best, contrast=slow)
    on = build(request, DESCRIBED_DEVICE).messages[1][1]
    assert "Machine code (static counts):\n- softmax_baseline (40 instructions" in on
    assert f"Machine code (fastest so far, {best.id[:8]}), static counts:\n- softmax_fast" in on
    assert f"Machine code (a slower one, {slow.id[:8]}), static counts:\n- softmax_rows" in on
    off = build(request, DESCRIBED_DEVICE, diagnostics=False).messages[1][1]
    assert "Machine code" not in off and "instructions in the code" not in off
    assert "Median" in off  # the rest of the feedback stays


def test_unavailable_diagnostics_are_not_shown() -> None:
    parent = scored(BUILTIN.baseline_source, 4650.0, "diagnostics unavailable (nvdisasm not found or failed)")
    user = build(ProposalRequest(BUILTIN, (parent,)), DESCRIBED_DEVICE).messages[1][1]
    assert "unavailable" not in user and "Machine code" not in user


def test_fsr_prompt_prints_both_messages_for_a_built_in_and_an_imported_task(
        imported: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prompt", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "===== system message (" in out and "===== user message (" in out
    assert "# The task: softmax" in out and "shortened to fit: nothing" in out and "No GPU was measured" in out
    assert main(["--tasks-dir", str(imported), "prompt", "kb1_23_softmax"]) == 0
    out = capsys.readouterr().out
    assert "# The task: kb1_23_softmax" in out and out.count("return torch.softmax(x, dim=1)") == 1


def test_fsr_prompt_improving_a_kernel_shows_its_evaluation_from_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fsr import run_json

    parent, best = scored(GOOD_KERNEL, 200.0), scored(FAST_KERNEL, 150.0)
    run = tmp_path / "run"
    run_json.write_run_json(run, {})
    with LineageWriter(run) as writer:
        for s in (parent, best):
            assert s.evaluation is not None
            writer.append(s.candidate, s.evaluation)
    kernel = tmp_path / "k.cu"
    kernel.write_text(GOOD_KERNEL)
    assert main(["prompt", "softmax", "--parent", str(kernel), "--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert "# The kernel to improve" in out and "Median 200 us" in out and "| fastest so far" in out
    assert "Machine code (static counts)" in out
    assert main(["prompt", "softmax", "--parent", str(kernel)]) == 0
    assert "Not evaluated yet." in capsys.readouterr().out


def test_fsr_prompt_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prompt", "no_such_task"]) == 2
    assert main(["prompt", "softmax", "--parent", str(tmp_path / "missing.cu")]) == 2
    assert main(["prompt", "softmax", "--parent", str(tmp_path), "--run", str(tmp_path)]) == 2
    (tmp_path / "k.cu").write_text(GOOD_KERNEL)
    assert main(["prompt", "softmax", "--parent", str(tmp_path / "k.cu"), "--run", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not a run directory" in err and "Traceback" not in err
    assert all(line.startswith("fsr: error: ") for line in err.strip().splitlines())


def test_the_config_switch_reaches_fsr_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fsr import run_json

    parent = scored(GOOD_KERNEL, 200.0)
    run_json.write_run_json(tmp_path / "run", {})
    with LineageWriter(tmp_path / "run") as writer:
        assert parent.evaluation is not None
        writer.append(parent.candidate, parent.evaluation)
    (tmp_path / "k.cu").write_text(GOOD_KERNEL)
    config = tmp_path / "fsr.toml"
    config.write_text("[llm]\ndiagnostics = false\nprompt_budget_tokens = 1500\n")
    args = ["prompt", "softmax", "--parent", str(tmp_path / "k.cu"), "--run", str(tmp_path / "run")]
    assert main(["--config", str(config), *args]) == 0
    out = capsys.readouterr().out
    assert "Median 200 us" in out and "Machine code" not in out
    assert "of a budget of 1500" in out and "shortened to fit: nothing" not in out


def test_an_import_whose_description_lacks_the_module_shows_it_from_reference_py(imported: Path, tmp_path: Path) -> None:
    import re
    import shutil

    folder = tmp_path / "kb1_23_softmax"
    shutil.copytree(imported / "kb1_23_softmax", folder)
    toml = (folder / "task.toml").read_text()
    (folder / "task.toml").write_text(re.sub(r"description = '''.*?'''", 'description = "Softmax over dim 1."',
                                             toml, count=1, flags=re.S))
    _, user = first_round(tasks.load(folder))
    assert "Softmax over dim 1.\n\nThe module's source:\n\n```python\nimport torch" in user
    assert user.count("return torch.softmax(x, dim=1)") == 1 and "torch_lock" not in user
