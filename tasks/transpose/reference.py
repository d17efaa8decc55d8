"""Transpose: distinct values everywhere (a kernel that swaps two elements is wrong), float64
reference, CuPy comparator."""

import numpy as np


def make_inputs(sizes, rng):
    return {"x": rng.standard_normal((sizes["rows"], sizes["cols"]), dtype=np.float32)}


def reference(inputs, sizes):
    return {"y": np.ascontiguousarray(inputs["x"].T).astype(np.float64)}


def library(inputs, sizes):
    import cupy as cp

    return {"y": cp.ascontiguousarray(inputs["x"].T)}


def torch_eager(inputs, sizes):
    import torch

    return torch.as_tensor(inputs["x"], device="cuda").t().contiguous()
