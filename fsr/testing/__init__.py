"""Doubles for running fsr without a GPU or a model, and the contracts a user's own
implementation must pass.

- fakes, fake_gpu, llm_server: fake evaluators, an in-process executor and a scripted
  OpenAI-compatible server; used by fsr's tests and by bench/. Nothing here imports Ray (the
  Ray-side doubles are in cluster.testing).
- proposer_contract, executor_contract, evaluator_contract: the behaviour every `Proposer`,
  `Executor` and `Evaluator` must have, as pytest classes to subclass (as `optuna.testing`
  ships its sampler suites). They import pytest, a development dependency, so this package does
  not import them; a test module does:

      from fsr.testing.proposer_contract import ProposerContract

      class TestMyProposer(ProposerContract):
          origin_name = "mine"

          def make_proposer(self):
              return MyProposer()

  then `pytest` runs every contract test against `MyProposer`.
"""
