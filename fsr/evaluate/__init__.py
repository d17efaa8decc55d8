"""The evaluation pipeline: compile, guard, verify, tune, time, judge.

Two sides of one process boundary. This package is the GPU worker's side: `GpuEvaluator`
(evaluator.py) checks a candidate's header, guards and compiles it (no GPU needed), hands it to
its GPU child through the sandbox (sandbox.py) as the records of wire.py, and judges what comes
back. Everything that touches CUDA runs in that child, in the sub-package `gpu/`; nothing outside
`gpu/` imports cupy at module level.

The deadlines below are public: the Ray executor derives its own backstop from them.
"""

START_TIMEOUT_S = 180.0  # a GPU child's start: import cupy, create a context, measure the ceilings
PREPARE_TIMEOUT_S = 600.0  # a task's benchmark inputs and float64 references, built once per child
READY_TIMEOUT_S = 60.0  # answering "ready" is a lookup: this only bounds a wedged child
