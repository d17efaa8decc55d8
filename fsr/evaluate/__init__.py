"""The evaluation pipeline: compile, guard, verify, tune, time, judge.

`Evaluator` (evaluator.py) is the entry point; CUDA work happens only in its child process
(sandbox.py), so nothing here imports cupy at module level.
"""
