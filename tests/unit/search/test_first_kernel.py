"""A task without baseline.cu (what `fsr import` writes): a model writes its first kernels, the
islands and the fsr loop start empty, failed first kernels go back to the model, a resumed run
carries on from the first kernels in its lineage, and speedups read against PyTorch eager."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsr.config import LLMConfig, SearchConfig
from fsr.lineage import LineageWriter, read
from fsr.propose.base import ProposalRequest, Scored, speedup_basis, task_speedup
from fsr.propose.llm import LLMProposer
from fsr.propose.mutate import MutateProposer
from fsr.propose.prompt import build, reference_source
from fsr.search.fsr_strategy import run_fsr
from fsr.search.loop import run_campaign
from fsr.search.pace import Ceilings
from fsr.search.state import seed_candidates
from fsr.tasks import load
from fsr.testing.fakes import FakeEvaluator, FakeExecutor, timing, without_baseline
from fsr.testing.llm_server import FAST_KERNEL, GOOD_KERNEL, ScriptedServer, fenced, reply
from fsr.types import Evaluation, Verdict

BROKEN = GOOD_KERNEL + "\n#error first attempt: does not compile\n"  # a COMPILE_ERROR in FakeEvaluator
PROSE = "I would describe the kernel rather than write it."
WRITE = "There is no kernel for this task yet: write the first one"
PARENT = "# The kernel to improve"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedServer]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedServer() as s:
        yield s


@pytest.fixture
def imported(tmp_path: Path):
    return without_baseline(load("softmax"), tmp_path / "tasks")


def model(server: ScriptedServer) -> LLMProposer:
    return LLMProposer(LLMConfig(model="scripted-model", base_url=server.base_url, retries=0, timeout_s=5.0,
                                 backoff_s=0.01))


def variants(count: int) -> list:
    return [reply(fenced(GOOD_KERNEL + f"// variant {i}\n")) for i in range(count)]


def eager_evaluator() -> FakeEvaluator:
    """No baseline timed (as the evaluator reports it for such a task); PyTorch eager at 2 ms."""
    return FakeEvaluator(base_us=1000.0, noise=0.0, baseline=False, torch_us=2000.0)


def campaign(task, server: ScriptedServer, run_dir: Path, max_evaluations: int, resume: Path | None = None):
    with LineageWriter(run_dir) as writer:
        return run_campaign([task], FakeExecutor(eager_evaluator(), slots=1), model(server),
                            SearchConfig(islands=1, max_evaluations=max_evaluations), writer,
                            resume=resume, pace=Ceilings(max_in_flight=1))


def test_an_imported_task_has_no_seeds_and_its_first_request_asks_to_write_a_kernel(imported):
    assert seed_candidates(imported) == [] and seed_candidates(load("softmax"))
    first = build(ProposalRequest(task=imported, parents=()), None)
    user = first.messages[1][1]
    assert WRITE in user and PARENT not in user and "Earlier attempts failed" not in user
    assert imported.description.strip()[:60] in user and reference_source(imported).strip()[:80] in user


def test_a_model_writes_the_first_kernel_and_failures_go_back_until_one_is_correct(server, imported, tmp_path):
    broken_again = BROKEN.replace("first attempt", "second attempt")
    server.push(reply(PROSE), reply(fenced(BROKEN)), reply(fenced(broken_again)), reply(fenced(FAST_KERNEL)),
                *variants(8))
    summary = campaign(imported, server, tmp_path / "run", max_evaluations=5)
    prompts = server.prompts()
    assert WRITE in prompts[0] and PARENT not in prompts[0]
    # The prose reply and the compile error each reach a later first-round prompt.
    assert "could not be used" in prompts[1] and WRITE in prompts[1] and PARENT not in prompts[1]
    retry = [p for p in prompts if "Verdict COMPILE_ERROR" in p and "#error first attempt" in p]
    assert any(WRITE in p and PARENT not in p for p in retry), "no first-round retry carried the failure"
    assert any(PARENT in p for p in prompts), "the island never evolved from its first correct kernel"
    rows = read(tmp_path / "run").to_pylist()
    ok = [r for r in rows if r["verdict"] == "OK"]
    assert ok and rows[0]["verdict"] == "COMPILE_ERROR" and rows[0]["parents"] == [] and rows[0]["move"] == "write"
    assert any(r["parents"] for r in ok), "no kernel was derived from a first kernel"
    best = summary.tasks[0]
    assert best.speedup_basis == "PyTorch eager" and best.best_speedup == pytest.approx(2.0, rel=0.05)


def test_a_resumed_run_carries_on_from_the_first_kernels_in_its_lineage(server, imported, tmp_path):
    server.push(reply(fenced(BROKEN)), reply(fenced(GOOD_KERNEL)), *variants(3))
    campaign(imported, server, tmp_path / "run", max_evaluations=2)
    assert [r["verdict"] for r in read(tmp_path / "run").to_pylist()] == ["COMPILE_ERROR", "OK"]
    asked = len(server.bodies)
    server.push(*variants(6))
    summary = campaign(imported, server, tmp_path / "run", max_evaluations=4, resume=tmp_path / "run")
    resumed = server.prompts()[asked:]
    assert summary.resumed == 2 and summary.tasks[0].finished == 4
    assert resumed and all(PARENT in p and WRITE not in p for p in resumed)  # the first kernel is the parent
    assert "2.00x over PyTorch eager" in resumed[0]  # the parent's result, against eager


def test_a_resumed_run_with_only_failed_first_kernels_asks_again_with_the_failures(server, imported, tmp_path):
    server.push(reply(fenced(BROKEN)), *variants(3))
    campaign(imported, server, tmp_path / "run", max_evaluations=1)
    asked = len(server.bodies)
    campaign(imported, server, tmp_path / "run", max_evaluations=2, resume=tmp_path / "run")
    resumed = server.prompts()[asked]
    assert WRITE in resumed and "#error first attempt" in resumed and PARENT not in resumed


def test_the_fsr_loop_writes_its_first_kernel_then_improves_the_fastest(server, imported, tmp_path):
    server.push(reply(fenced(BROKEN)), reply(fenced(GOOD_KERNEL)), *variants(4))
    executor = FakeExecutor(eager_evaluator(), slots=1)
    summary = run_fsr(imported, executor, model(server), SearchConfig(max_evaluations=10), None, depth=3,
                      n_per_round=1)
    prompts = server.prompts()
    assert [r.parent for r in summary.rounds[:2]] == ["", ""] and summary.rounds[2].parent
    assert WRITE in prompts[0] and PARENT not in prompts[0]
    assert WRITE in prompts[1] and "#error first attempt" in prompts[1]
    assert PARENT in prompts[2] and summary.best is not None and summary.evaluations == 3


def test_speedups_of_a_task_without_a_baseline_are_over_pytorch_eager(imported):
    softmax = load("softmax")
    ev = Evaluation("c", "softmax", Verdict.OK, timing=timing(500.0), baseline_us=None, torch_us=1500.0)
    assert speedup_basis(imported) == "PyTorch eager" and task_speedup(imported, ev) == pytest.approx(3.0)
    assert speedup_basis(softmax) == "the baseline" and task_speedup(softmax, ev) is None  # no baseline time
    assert task_speedup(imported, Evaluation("c", "softmax", Verdict.OK, timing=timing(500.0))) is None
    assert task_speedup(imported, Evaluation("c", "softmax", Verdict.WRONG, torch_us=1500.0)) is None


def test_progress_and_summary_lines_say_vs_eager(server, imported, tmp_path):
    from fsr.propose.base import speedup_words
    from fsr.view import LineView

    server.push(reply(fenced(GOOD_KERNEL)), *variants(2))
    summary = campaign(imported, server, tmp_path / "run", max_evaluations=2)
    out = io.StringIO()
    LineView(out).close(summary.progress)
    assert "(2.00x vs eager)" in out.getvalue(), out.getvalue()
    assert speedup_words(2.0, "PyTorch eager") == "2.00x vs PyTorch eager"
    assert speedup_words(None, "PyTorch eager") == "no baseline.cu, PyTorch eager not timed"
    assert speedup_words(1.5, "the baseline") == "1.50x the baseline"
    assert speedup_words(None, "the baseline") == "0.00x the baseline"


def test_the_offline_proposer_leaves_a_task_without_baseline_out_in_one_line(imported, capsys):
    from fsr.commands import UsageError
    from fsr.commands.run import startable

    softmax = load("softmax")
    assert startable([imported, softmax], MutateProposer()) == [softmax]
    assert capsys.readouterr().err == (
        "fsr: softmax: no baseline.cu and no model: the offline proposer needs a kernel to start from; "
        "configure a model (docs/models.md) or add baseline.cu; left out, the other tasks go on\n")
    with pytest.raises(UsageError, match="^softmax: no baseline.cu and no model"):
        startable([imported], MutateProposer())
    assert startable([imported, softmax], model_stub()) == [imported, softmax]
    assert capsys.readouterr().err == ""


def model_stub() -> LLMProposer:
    return LLMProposer(LLMConfig(model="m", base_url="http://127.0.0.1:9/v1"))


def test_the_offline_proposer_given_such_a_task_anyway_goes_on_with_the_others(imported, tmp_path):
    other = without_baseline(load("gelu"), tmp_path / "more")  # a second task name, left without seeds
    softmax = load("softmax")
    executor = FakeExecutor(FakeEvaluator(), slots=2)
    summary = run_campaign([other, softmax], executor, MutateProposer(), SearchConfig(islands=2, max_evaluations=12))
    by_task = {t.task: t for t in summary.tasks}
    assert by_task["gelu"].finished == 0 and "nothing new" in by_task["gelu"].note
    assert by_task["softmax"].finished == 12 and by_task["softmax"].best_us


def test_a_first_round_retry_carries_the_failed_attempt_and_its_verdict(imported):
    failed = Scored(*_failed(imported))
    retry = build(ProposalRequest(task=imported, parents=(), failures=(failed,)), None).messages[1][1]
    assert WRITE in retry and "Earlier attempts failed" in retry and "Verdict COMPILE_ERROR" in retry


def _failed(task):
    from fsr.candidate import parse
    from fsr.propose.features import detect

    cand = parse(BROKEN, task)
    return cand, Evaluation(cand.id, task.name, Verdict.COMPILE_ERROR, message="error: does not compile"), detect(cand)
