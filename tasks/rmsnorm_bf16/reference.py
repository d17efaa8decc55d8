"""RMS norm of bfloat16 rows: inputs drawn in float32 and rounded to bfloat16 (ml_dtypes), rows of
their own scale and offset, float64 reference of the rounded values, PyTorch comparators (CuPy
has no bfloat16).

A bfloat16 buffer reaches `library` and `torch_eager` as a CuPy uint16 array holding its bits
(fsr.dtypes.device_dtype): they view it as torch.bfloat16 without a copy."""

import ml_dtypes
import numpy as np

EPS = 1e-6  # must equal [constants] eps in task.toml


def make_inputs(sizes, rng):
    rows, cols = sizes["rows"], sizes["cols"]
    # Rows differ in scale (a kernel that skips the normalisation is wrong) and carry an offset
    # (the mean is not subtracted: a layer norm is wrong too).
    offset = rng.uniform(-1.0, 1.0, size=(rows, 1)).astype(np.float32)
    scale = rng.uniform(0.25, 4.0, size=(rows, 1)).astype(np.float32)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    x *= scale
    x += offset
    weight = rng.uniform(-2.0, 2.0, size=cols).astype(np.float32)
    return {"x": x.astype(ml_dtypes.bfloat16), "weight": weight.astype(ml_dtypes.bfloat16)}


def reference(inputs, sizes):
    y = inputs["x"].astype(np.float64)
    ms = np.einsum("ij,ij->i", y, y) / y.shape[1]
    y *= (1.0 / np.sqrt(ms + EPS))[:, None]
    y *= inputs["weight"].astype(np.float64)
    return {"y": y}


def _bf16(a):
    """A bfloat16 tensor viewing the CuPy array of bfloat16 bits (through int16, which both know)."""
    import cupy as cp
    import torch

    return torch.as_tensor(a.view(cp.int16), device="cuda").view(torch.bfloat16)


def library(inputs, sizes):
    import cupy as cp
    import torch

    y = torch.nn.functional.rms_norm(_bf16(inputs["x"]), (sizes["cols"],), _bf16(inputs["weight"]), eps=EPS)
    return {"y": cp.asarray(y.view(torch.int16)).view(cp.uint16)}  # bfloat16's bits, as fsr holds them


def torch_eager(inputs, sizes):
    import torch

    return torch.nn.functional.rms_norm(_bf16(inputs["x"]), (sizes["cols"],), _bf16(inputs["weight"]), eps=EPS)
