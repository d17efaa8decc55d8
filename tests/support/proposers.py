"""Proposers the search tests share."""

from __future__ import annotations

from concurrent.futures import Future

from fsr.propose.base import ProposalRequest, Proposals
from fsr.propose.mutate import MutateProposer


class Recording(MutateProposer):
    """The offline mutator, keeping every request it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[ProposalRequest] = []

    def start(self, request: ProposalRequest) -> Future[Proposals]:
        self.requests.append(request)
        return super().start(request)
