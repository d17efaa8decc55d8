"""Softmax: float64 reference, inputs whose rows differ in scale and offset, CuPy comparator."""

import numpy as np


def make_inputs(sizes, rng):
    rows, cols = sizes["rows"], sizes["cols"]
    # Per-row offset and scale so that the row max matters (a kernel that skips the max
    # subtraction overflows) and outputs are far from uniform.
    offset = rng.uniform(-20.0, 20.0, size=(rows, 1))
    scale = rng.uniform(0.5, 4.0, size=(rows, 1))
    x = offset + scale * rng.standard_normal((rows, cols))
    return {"x": x.astype(np.float32)}


def reference(inputs, sizes):
    x = inputs["x"].astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"y": e / e.sum(axis=1, keepdims=True)}


def library(inputs, sizes):
    import cupy as cp

    x = inputs["x"]
    e = cp.exp(x - x.max(axis=1, keepdims=True))
    return {"y": e / e.sum(axis=1, keepdims=True)}
