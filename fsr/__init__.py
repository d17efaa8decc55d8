"""fsr: feature search and reinforcement for CUDA kernels.

Importing fsr loads neither ray nor cupy: the Ray layer lives in `cluster/`, and CUDA is only
touched inside the evaluator's child process (`fsr.evaluate.sandbox`).
"""

__version__ = "0.1.0"
