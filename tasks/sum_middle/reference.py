"""Sum over the middle dimension: N(0, 1) values around a small offset per (a, c), so outputs
differ in sign and size and a kernel that sums the wrong axis is wrong; float64 reference
(accumulated in float64 without a float64 copy of x), CuPy comparator."""

import numpy as np


def make_inputs(sizes, rng):
    a, b, c = sizes["A"], sizes["B"], sizes["C"]
    x = rng.standard_normal((a, b, c), dtype=np.float32)
    x += rng.uniform(-0.05, 0.05, size=(a, 1, c)).astype(np.float32)
    return {"x": x}


def reference(inputs, sizes):
    return {"y": inputs["x"].sum(axis=1, dtype=np.float64)}


def library(inputs, sizes):
    return {"y": inputs["x"].sum(axis=1)}


def torch_eager(inputs, sizes):
    import torch

    return torch.sum(torch.as_tensor(inputs["x"], device="cuda"), dim=1)
