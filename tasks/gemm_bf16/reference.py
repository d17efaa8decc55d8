"""bfloat16 GEMM: uniform(-1, 1) inputs rounded to bfloat16 (outputs vary in sign and size),
float64 reference from those bfloat16 values, cuBLAS through torch.matmul on bfloat16 tensors
(CuPy has no bfloat16: the buffers reach `library` and `torch_eager` as CuPy uint16 arrays of
bfloat16 bits, which PyTorch views without a copy)."""

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)


def make_inputs(sizes, rng):
    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    a = rng.uniform(-1.0, 1.0, size=(m, k)).astype(np.float32).astype(BF16)
    b = rng.uniform(-1.0, 1.0, size=(k, n)).astype(np.float32).astype(BF16)
    return {"A": a, "B": b}


def reference(inputs, sizes):
    return {"C": inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)}


def _bf16(a):
    """A bfloat16 tensor viewing a CuPy array of bfloat16 bits, as fsr holds such a buffer on the
    device (uint16: CuPy has no bfloat16), through int16, which both know; no copy."""
    import cupy as cp
    import torch

    return torch.as_tensor(a.view(cp.int16), device="cuda").view(torch.bfloat16)


def _bits(t):
    """A bfloat16 tensor's bits as a CuPy uint16 array, as fsr holds bfloat16 outputs."""
    import cupy as cp
    import torch

    return cp.asarray(t.view(torch.int16)).view(cp.uint16)


def library(inputs, sizes):
    import torch

    return {"C": _bits(torch.matmul(_bf16(inputs["A"]), _bf16(inputs["B"])))}


def torch_eager(inputs, sizes):
    import torch

    return torch.matmul(_bf16(inputs["A"]), _bf16(inputs["B"]))
