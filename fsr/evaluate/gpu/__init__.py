"""The GPU child: everything that runs in the process that owns a worker's CUDA context.

`child.main` is the process's entry point (started by fsr.evaluate.sandbox); the other modules are
what it runs: preparing a task (inputs, references, uploads, comparators), checking a candidate's
outputs, tuning its launch parameters and timing it. These modules import CuPy at module level
and are imported only in that process; the worker's side (fsr.evaluate) talks to them through the
records of fsr.evaluate.wire alone. Nothing here imports cupy in this `__init__`, so the wire and
the worker's side stay importable without CUDA.
"""
