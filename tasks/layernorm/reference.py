"""Layer norm over the last dimension: rows with their own offset and scale, float64 reference,
CuPy comparator."""

import numpy as np

EPS = 1e-5  # must equal [constants] eps in task.toml


def make_inputs(sizes, rng):
    rows, cols = sizes["rows"], sizes["cols"]
    # Offsets comparable to the spread, so a kernel that skips the mean is wrong, but not so
    # large that an honest one-pass fp32 variance (E[x^2] - E[x]^2) cancels catastrophically.
    offset = rng.uniform(-2.0, 2.0, size=(rows, 1)).astype(np.float32)
    scale = rng.uniform(0.5, 2.0, size=(rows, 1)).astype(np.float32)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    x *= scale
    x += offset
    weight = rng.uniform(-2.0, 2.0, size=cols).astype(np.float32)
    bias = rng.uniform(-1.0, 1.0, size=cols).astype(np.float32)
    return {"x": x, "weight": weight, "bias": bias}


def reference(inputs, sizes):
    y = inputs["x"].astype(np.float64)
    y -= y.mean(axis=1, keepdims=True)
    var = np.einsum("ij,ij->i", y, y) / y.shape[1]
    y *= (1.0 / np.sqrt(var + EPS))[:, None]
    y *= inputs["weight"].astype(np.float64)
    y += inputs["bias"].astype(np.float64)
    return {"y": y}


def library(inputs, sizes):
    import cupy as cp

    x = inputs["x"]
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return {"y": (x - mean) / cp.sqrt(var + EPS) * inputs["weight"] + inputs["bias"]}


def torch_eager(inputs, sizes):
    import torch

    x = torch.as_tensor(inputs["x"], device="cuda")
    weight = torch.as_tensor(inputs["weight"], device="cuda")
    bias = torch.as_tensor(inputs["bias"], device="cuda")
    return torch.nn.functional.layer_norm(x, (sizes["cols"],), weight, bias, eps=EPS)
