"""The Proposer contract, run against the offline mutator and the model proposers (one model and
an ensemble) talking to the scripted OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fsr.config import LLMConfig
from fsr.propose.base import ProposalRequest, Proposer
from fsr.propose.llm import LLMEnsemble, LLMProposer
from fsr.propose.mutate import MutateProposer
from fsr.testing.llm_server import FAST_KERNEL, GOOD_KERNEL, ScriptedServer, fenced, reply
from fsr.testing.proposer_contract import ProposerContract, request


class TestMutateProposer(ProposerContract):
    origin_name = "mutate"

    def make_proposer(self) -> MutateProposer:
        return MutateProposer()


class TestLLMProposer(ProposerContract):
    """Each request is answered with fresh kernels; `make_unusable` scripts prose without code."""

    origin_name = "llm"

    @pytest.fixture(autouse=True)
    def server(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedServer]:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        with ScriptedServer() as s:
            self.endpoint = s
            yield s

    def model(self, name: str = "scripted-model") -> LLMProposer:
        return LLMProposer(LLMConfig(model=name, base_url=self.endpoint.base_url, retries=0, timeout_s=5.0,
                                     backoff_s=0.01))

    def make_proposer(self) -> Proposer:
        kernels = (GOOD_KERNEL, FAST_KERNEL) * 4
        self.endpoint.push(*(reply(fenced(k + f"// variant {i}\n")) for i, k in enumerate(kernels)))
        return self.model()

    def make_unusable(self) -> tuple[Proposer, ProposalRequest]:
        self.endpoint.push(*(reply("I would rather describe the kernel than write it.") for _ in range(4)))
        return self.model(), request(n=2)


class TestLLMEnsemble(TestLLMProposer):
    def model(self, name: str = "scripted-model") -> LLMEnsemble:  # type: ignore[override]
        return LLMEnsemble([super().model("model-a"), super().model("model-b")], by_island=True)
