"""GEMV: uniform(-1, 1) inputs (outputs vary in sign and size), float64 reference computed in
row blocks (the benchmark matrix in float64 would take 1 GiB), cuBLAS via CuPy. A is drawn in
float32 and shifted in place: a float64 draw of the benchmark matrix would take 1 GiB and most
of the task's preparation time on each worker."""

import numpy as np

ROWS_PER_BLOCK = 1024


def make_inputs(sizes, rng):
    m, n = sizes["M"], sizes["N"]
    a = rng.random((m, n), dtype=np.float32)
    a *= 2.0
    a -= 1.0
    x = rng.uniform(-1.0, 1.0, size=n).astype(np.float32)
    return {"A": a, "x": x}


def reference(inputs, sizes):
    a, x = inputs["A"], inputs["x"].astype(np.float64)
    y = np.empty(a.shape[0], np.float64)
    for r in range(0, a.shape[0], ROWS_PER_BLOCK):
        y[r:r + ROWS_PER_BLOCK] = a[r:r + ROWS_PER_BLOCK].astype(np.float64) @ x
    return {"y": y}


def library(inputs, sizes):
    import cupy as cp

    return {"y": cp.matmul(inputs["A"], inputs["x"])}


def torch_eager(inputs, sizes):
    import torch

    return torch.mv(torch.as_tensor(inputs["A"], device="cuda"), torch.as_tensor(inputs["x"], device="cuda"))
