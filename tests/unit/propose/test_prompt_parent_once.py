"""`fsr prompt --parent runs/<id>/best/<task>.cu --run runs/<id>`: the run's best kernel, written
with its tuned values as defaults (so its content hash differs from its lineage row's), is found
in the lineage, shown with its measurements, and printed once although it is also the fastest."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsr import run_json
from fsr.candidate import export, parse
from fsr.cli import main
from fsr.lineage import LineageWriter
from fsr.testing.fakes import softmax_task, timing
from fsr.testing.llm_server import FAST_KERNEL, GOOD_KERNEL
from fsr.types import Evaluation, Verdict

TASK = softmax_task(None)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run whose fastest kernel (FAST_KERNEL, 150 us) was tuned to BLOCK=512, beside a slower one."""
    run = tmp_path / "run"
    run_json.write_run_json(run, {})
    with LineageWriter(run) as writer:
        for source, us, tuned in ((GOOD_KERNEL, 200.0, ()), (FAST_KERNEL, 150.0, (("BLOCK", 512),))):
            cand = parse(source, TASK)
            writer.append(cand, Evaluation(cand.id, TASK.name, Verdict.OK, timing=timing(us), baseline_us=4650.0,
                                           tuned_defines=tuned))
    return run


def prompt_of(kernel: Path, run: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["prompt", "softmax", "--parent", str(kernel), "--run", str(run)]) == 0
    return capsys.readouterr().out


def test_the_runs_best_kernel_is_shown_once_with_its_measurements(run: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    best = tmp_path / "softmax.cu"
    best.write_text(export(parse(FAST_KERNEL, TASK), (("BLOCK", 512),)))
    assert parse(best.read_text(), TASK).id != parse(FAST_KERNEL, TASK).id  # the case: another hash
    out = prompt_of(best, run, capsys)
    assert out.count("void softmax_fast(") == 1 and "The fastest so far:" not in out
    assert "Not evaluated yet" not in out and "Median 150 us" in out and "tuned to BLOCK=512" in out


def test_a_kernel_the_run_never_saw_is_not_evaluated_and_the_fastest_comes_beside_it(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The check must reject: a kernel that differs from every row (BLOCK=128 made the default,
    which no row was tuned to) is not taken for the fastest one."""
    other = tmp_path / "other.cu"
    other.write_text(export(parse(FAST_KERNEL, TASK), (("BLOCK", 128),)))
    out = prompt_of(other, run, capsys)
    assert "Not evaluated yet" in out and "The fastest so far:" in out and out.count("void softmax_fast(") == 2
