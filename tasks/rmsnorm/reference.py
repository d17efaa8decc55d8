"""RMS norm over the last dimension: rows of their own scale and offset, float64 reference, CuPy
comparator."""

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
    return {"x": x, "weight": weight}


def reference(inputs, sizes):
    y = inputs["x"].astype(np.float64)
    ms = np.einsum("ij,ij->i", y, y) / y.shape[1]
    y *= (1.0 / np.sqrt(ms + EPS))[:, None]
    y *= inputs["weight"].astype(np.float64)
    return {"y": y}


def library(inputs, sizes):
    import cupy as cp

    x = inputs["x"]
    return {"y": x / cp.sqrt((x * x).mean(axis=1, keepdims=True) + EPS) * inputs["weight"]}


def torch_eager(inputs, sizes):
    import torch

    x = torch.as_tensor(inputs["x"], device="cuda")
    weight = torch.as_tensor(inputs["weight"], device="cuda")
    return torch.nn.functional.rms_norm(x, (sizes["cols"],), weight, eps=EPS)
