"""The Evaluator contract, run against the fake evaluator, the scripted server's stand-in (a real
NVRTC compile, no GPU) and, on a machine with a CUDA device, the GPU evaluator."""

from __future__ import annotations

import pytest

from fsr.config import Config, EvalConfig, TuneConfig
from fsr.tasks import load
from fsr.testing.evaluator_contract import EvaluatorContract
from fsr.testing.fakes import FakeEvaluator
from fsr.testing.llm_server import StandInEvaluator
from fsr.types import WorkerSpec


class TestFakeEvaluator(EvaluatorContract):
    def make_evaluator(self) -> FakeEvaluator:
        return FakeEvaluator()


class TestStandInEvaluator(EvaluatorContract):
    def make_evaluator(self) -> StandInEvaluator:
        return StandInEvaluator()


@pytest.mark.gpu
class TestGpuEvaluator(EvaluatorContract):
    def make_evaluator(self):
        from fsr.evaluate.evaluator import GpuEvaluator
        from tests.support.xdist_gpus import shared_budget

        # torch.compile off: the contract reads no comparator figure, and its compile would be
        # most of this class's time; the worker's share of a GPU other workers use
        config = Config(eval=EvalConfig(torch_compile="off", prepared_max_bytes=shared_budget()), tune=TuneConfig(trials=0))
        return GpuEvaluator(WorkerSpec.of(config, [load("softmax")]))

    @pytest.fixture(scope="class")
    def evaluator(self):
        """One evaluator (one GPU child) for the class: the contract's tests leave nothing in it that
        another could see, and each would otherwise start a child of its own."""
        ev = self.make_evaluator()
        try:
            yield ev
        finally:
            ev.close()
