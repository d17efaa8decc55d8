"""Softmax: float64 reference, inputs whose rows differ in scale and offset, CuPy comparator.
The inputs are drawn and shifted in float32 (in place): at the benchmark size a float64 draw is
most of the cost of preparing the task on each worker."""

import numpy as np


def make_inputs(sizes, rng):
    rows, cols = sizes["rows"], sizes["cols"]
    # Per-row offset and scale so that the row max matters (a kernel that skips the max
    # subtraction overflows) and outputs are far from uniform.
    offset = rng.uniform(-20.0, 20.0, size=(rows, 1)).astype(np.float32)
    scale = rng.uniform(0.5, 4.0, size=(rows, 1)).astype(np.float32)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    x *= scale
    x += offset
    return {"x": x}


def reference(inputs, sizes):
    x = inputs["x"].astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"y": e / e.sum(axis=1, keepdims=True)}


def library(inputs, sizes):
    import cupy as cp

    x = inputs["x"]
    e = cp.exp(x - x.max(axis=1, keepdims=True))
    return {"y": e / e.sum(axis=1, keepdims=True)}


def torch_eager(inputs, sizes):
    import torch

    return torch.softmax(torch.as_tensor(inputs["x"], device="cuda"), dim=1)
