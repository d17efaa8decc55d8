"""SGEMM: uniform(-1, 1) inputs (outputs vary in sign and size), float64 reference, cuBLAS via CuPy."""

import numpy as np


def make_inputs(sizes, rng):
    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    a = rng.uniform(-1.0, 1.0, size=(m, k)).astype(np.float32)
    b = rng.uniform(-1.0, 1.0, size=(k, n)).astype(np.float32)
    return {"A": a, "B": b}


def reference(inputs, sizes):
    return {"C": inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)}


def library(inputs, sizes):
    import cupy as cp

    return {"C": cp.matmul(inputs["A"], inputs["B"])}


def torch_eager(inputs, sizes):
    import torch

    return torch.matmul(torch.as_tensor(inputs["A"], device="cuda"), torch.as_tensor(inputs["B"], device="cuda"))
