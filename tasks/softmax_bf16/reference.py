"""Softmax of bfloat16 rows: inputs drawn in float32 and rounded to bfloat16 (ml_dtypes), float64
reference of those rounded values, PyTorch comparators (CuPy has no bfloat16).

A bfloat16 buffer reaches `library` and `torch_eager` as a CuPy uint16 array holding its bits
(fsr.dtypes.device_dtype): they view it as torch.bfloat16 without a copy."""

import ml_dtypes
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
    return {"x": x.astype(ml_dtypes.bfloat16)}


def reference(inputs, sizes):
    x = inputs["x"].astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"y": e / e.sum(axis=1, keepdims=True)}


def _bf16(a):
    """A bfloat16 tensor viewing the CuPy array of bfloat16 bits (through int16, which both know)."""
    import cupy as cp
    import torch

    return torch.as_tensor(a.view(cp.int16), device="cuda").view(torch.bfloat16)


def library(inputs, sizes):
    import cupy as cp
    import torch

    y = torch.softmax(_bf16(inputs["x"]), dim=1)
    return {"y": cp.asarray(y.view(torch.int16)).view(cp.uint16)}  # bfloat16's bits, as fsr holds them


def torch_eager(inputs, sizes):
    import torch

    return torch.softmax(_bf16(inputs["x"]), dim=1)
