"""Doubles for running fsr without a GPU or a model: fakes (evaluators and an in-process
executor) and a scripted OpenAI-compatible server. Used by the tests and by bench/; nothing here
imports Ray (the Ray-side doubles are in cluster.testing)."""
