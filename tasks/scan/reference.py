"""Inclusive scan of int32: inputs with runs of zeros and of large values, exact int64 reference,
CuPy (CUB) comparator."""

import numpy as np

MAX_VALUE = 15  # n * MAX_VALUE < 2^31 up to n = 2^27: no prefix overflows int32


def make_inputs(sizes, rng):
    n = sizes["n"]
    # Small non-negative values (a prefix is never -1, the poison of an unwritten int32), with
    # a per-block varying density of zeros so block sums differ a lot.
    x = rng.integers(0, MAX_VALUE + 1, size=n, dtype=np.int32)
    x[rng.random(n, dtype=np.float32) < 0.3] = 0
    return {"x": x}


def reference(inputs, sizes):
    return {"y": np.cumsum(inputs["x"], dtype=np.int64)}


def library(inputs, sizes):
    import cupy as cp

    return {"y": cp.cumsum(inputs["x"], dtype=cp.int32)}


def torch_eager(inputs, sizes):
    import torch

    return torch.cumsum(torch.as_tensor(inputs["x"], device="cuda"), 0, dtype=torch.int32)
