"""The Executor contract, run against the in-process fake (virtual and real clocks)."""

from __future__ import annotations

from fsr.testing.executor_contract import ExecutorContract
from fsr.testing.fakes import FakeEvaluator, FakeExecutor


class TestFakeExecutor(ExecutorContract):
    timeout_s = 5.0
    names_workers = False  # no worker is real: the lineage's worker column stays empty

    def make_executor(self) -> FakeExecutor:
        return FakeExecutor(FakeEvaluator(), slots=4, eval_s=1.0)


class TestFakeExecutorOnTheRealClock(ExecutorContract):
    timeout_s = 5.0
    names_workers = False  # no worker is real: the lineage's worker column stays empty

    def make_executor(self) -> FakeExecutor:
        return FakeExecutor(FakeEvaluator(), slots=2, eval_s=0.01, real_time=True)
