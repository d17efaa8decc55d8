"""The evaluation pipeline: compile, guard, verify, tune, time, judge.

`GpuEvaluator` (evaluator.py) is the entry point; CUDA work happens only in its child process
(sandbox.py), so nothing here imports cupy at module level.

The deadlines below are public: the Ray executor derives its own backstop from them.
"""

START_TIMEOUT_S = 180.0  # a GPU child's start: import cupy, create a context, measure the ceilings
PREPARE_TIMEOUT_S = 600.0  # a task's benchmark inputs and float64 references, built once per child
